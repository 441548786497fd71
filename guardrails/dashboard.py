"""The operator's live view, rendered from the same rules: a Grafana dashboard whose panels
are the recorded series and whose alert list is the rule group.

Grafana, because it is what the Prometheus side of this stack is read with: Amazon Managed
Grafana takes an AMP workspace as a data source with SigV4, and a local Grafana reads the
local Prometheus the same way; the CloudWatch dashboard of the Observability stack keeps the
load test's figures, which CloudWatch cannot join with the workspace's series. The JSON is
Grafana's dashboard model (grafana/grafana docs, "JSON model": panels with gridPos, type,
datasource, targets[].expr), importable by `Dashboards > Import`.
"""

from __future__ import annotations

from typing import Any

from guardrails.rules import RuleSet

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
_WIDTH = 12  # half of Grafana's 24-column grid
_HEIGHT = 8


def _panel(index: int, title: str, expr: str, legend: str) -> dict[str, Any]:
    return {
        "id": index + 1,
        "type": "timeseries",
        "title": title,
        "datasource": DATASOURCE,
        "gridPos": {
            "h": _HEIGHT,
            "w": _WIDTH,
            "x": (index % 2) * _WIDTH,
            "y": (index // 2) * _HEIGHT,
        },
        "targets": [{"refId": "A", "expr": expr, "legendFormat": legend}],
    }


def dashboard(rules: RuleSet) -> dict[str, Any]:
    """One panel per recorded series (by its labels), then the firing alerts of the group."""
    panels = [
        _panel(index, recording.record, recording.record, "{{arm}}{{route}}")
        for index, recording in enumerate(rules.recordings)
    ]
    rows = (len(panels) + 1) // 2
    panels.append(
        {
            "id": len(panels) + 1,
            "type": "alertlist",
            "title": f"{rules.group}: alerts",
            "gridPos": {"h": _HEIGHT, "w": 2 * _WIDTH, "x": 0, "y": rows * _HEIGHT},
            "options": {"groupBy": ["alertname"], "stateFilter": {"firing": True, "pending": True}},
        }
    )
    return {
        "title": rules.group,
        "uid": rules.group[:40],
        "schemaVersion": 39,
        "refresh": f"{rules.interval_s}s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {
            "list": [{"name": "datasource", "type": "datasource", "query": "prometheus"}]
        },
        "panels": panels,
    }
