"""Guardrails on live traffic: rules written once (``rules``), the scrape that feeds them
(``scrape``), and their renderings' shared pieces."""
