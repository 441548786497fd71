"""Choose the draft model and the window k from a few measured runs (``python -m tune``).

``loadtest.step_model`` holds the speedup model and ``tune.predict`` its fitting
(docs/tuning.md); the rest measures, plans and reports.
"""
