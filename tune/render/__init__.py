"""Renderers of a TuneResult, one module per output format."""
