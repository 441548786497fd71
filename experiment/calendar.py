"""The support calendar (experiment/config/upstreams.py) as text: the table with days left
(``python -m experiment upstreams``) and docs/upstreams.md (``--markdown``)."""

from __future__ import annotations

from datetime import date
from typing import Any

from experiment.config.upstreams import UPSTREAMS, rows_for


def table(on: date, config: Any | None = None) -> str:
    """The calendar as text, with days left (``python -m experiment upstreams``)."""
    applies = {row.name for row in rows_for(config)} if config is not None else set()
    lines = [f"support calendar on {on} (* applies to this configuration):"]
    for row in UPSTREAMS:
        left = row.days_left(on)
        ends = "no published end" if left is None else f"ends {row.end_of_support} ({left} d)"
        version = row.version or f"set by {row.setting}"
        mark = "*" if row.name in applies else " "
        lines.append(f"{mark} {row.name:32} {version:52} {ends}")
        lines.append(f"    source: {row.source} (checked {row.checked})")
        if row.notice:
            lines.append(f"    notice: {row.notice}")
    return "\n".join(lines)


def markdown() -> str:
    """docs/upstreams.md: generated, so no date in it can drift from the table."""
    lines = [
        "# Upstreams: the support calendar",
        "",
        "Generated from `experiment/config/upstreams.py` by `python -m experiment upstreams "
        "--markdown > docs/upstreams.md` (a test fails when it is stale). `cdk synth` warns on "
        "a pin whose support ends within `upstreams.warn_days` (30 by default) and refuses one "
        "past its end unless `-c experiment.upstreams.acknowledge=<name>,...` names it. "
        "`python -m experiment upstreams` prints the days left.",
        "",
        "| name | component | version | end of support | checked | source | rendered in |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in UPSTREAMS:
        version = f"`{row.version}`" if row.version else f"set by `{row.setting}`"
        end = str(row.end_of_support) if row.end_of_support else "none published"
        if row.end_source:
            end += f" ({row.end_source})"
        if row.notice:
            end += f"; notice: {row.notice}"
        when = f" (when `{row.when[0]}` is `{row.when[1]}`)" if row.when else ""
        lines.append(
            f"| `{row.name}` | {row.component}{when} | {version} | {end} | {row.checked} | "
            f"{row.source} | {row.rendered} |"
        )
    lines += [
        "",
        "Kubernetes: 1.35 is the default because, of the versions the Neuron stack is "
        "documented on (the Neuron DRA driver needs 1.34 or newer, EKS user guide "
        "device-management-neuron), its standard support runs longest among those with a "
        "published end. 1.36 is accepted (kubectl layer `aws-cdk.lambda-layer-kubectl-v36`); "
        "its end of standard support is not in a source reachable when the table was checked.",
        "",
    ]
    return "\n".join(lines)
