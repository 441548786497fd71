"""summary.csv: every statistic of every arm and scope, one value per row (long format)."""

from __future__ import annotations

import csv
from pathlib import Path

from loadtest.metrics import DISTRIBUTIONS, RATES
from loadtest.render.tables import STATS
from loadtest.results import RunSummary

HEADER = ["arm", "variant", "prompt_class", "metric", "stat", "value"]
# Scalar fields of a MetricBlock written as (metric, "value", value).
SCALARS = (*RATES, "requests", "succeeded", "failed", "length_mismatches", "slo_attainment")
ACCEPTANCE = ("acceptance_rate", "mean_acceptance_length")


def write_csv(summary: RunSummary, path: Path) -> None:
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(HEADER)
        for arm, block in summary.arms.items():
            scopes = {"all": block.overall, **block.by_class}
            for scope, metrics in scopes.items():
                for name in DISTRIBUTIONS:
                    distribution = metrics.distribution(name)
                    for stat in ("count", *STATS):
                        value = distribution.count if stat == "count" else distribution.stat(stat)
                        writer.writerow([arm, block.label, scope, name, stat, value])
                for name in SCALARS:
                    writer.writerow(
                        [arm, block.label, scope, name, "value", getattr(metrics, name)]
                    )
                for reason, count in metrics.failures_by_reason.items():
                    writer.writerow([arm, block.label, scope, f"failed_{reason}", "count", count])
            for name in ACCEPTANCE:
                value = getattr(block.acceptance, name)
                writer.writerow([arm, block.label, "all", name, "value", value])
