"""Choose the draft model and the window k from a few measured runs (``python -m tune``).

``tune.predict`` holds the arithmetic (docs/tuning.md), the rest measures, plans and reports.
"""
