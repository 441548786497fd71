"""Accuracy of the load generator against ground truth (``python -m bench``; bench/README.md)."""
