"""Renderers of the typed run summary (loadtest.results.RunSummary), one module per format.

``tables`` builds the content shared by the text formats (rows of strings); ``console``,
``markdown``, ``html``, ``csv`` and ``plots`` write it out; ``headline`` is the local run's
short statement of the numbers that matter. CloudWatch datums: loadtest.cloudwatch.
"""
