"""The tiered arm in the report as rows of strings: per prompt class, tiered vs baseline and
vs SD with their paired intervals, and whether it matched the arm its class is routed to.

Shared by the console, Markdown and HTML renderers like ``tables``; nothing when the run did
not drive the tiered arm.
"""

from __future__ import annotations

from loadtest.render.decision import Table, interval_text
from loadtest.results import GatewayCost, Lossless, RunSummary, TieredClass

HELD = {True: "held", False: "did not hold", None: "can't tell"}


def _routed(check: TieredClass) -> str:
    return "SD" if check.routed_to == "speculative" else "baseline"


def tiered_rows(summary: RunSummary) -> Table:
    """One row per prompt class: where the gateway sends it, the E2E speedups of the tiered
    arm over both serving arms (> 1: tiered faster), SD's own, and the check."""
    level = f"{summary.statistics.confidence:.0%} CI" if summary.statistics else "CI"
    header = [
        "prompt class",
        "routed to",
        f"tiered vs baseline, E2E mean [{level}]",
        f"tiered vs SD, E2E mean [{level}]",
        f"SD vs baseline [{level}]",
        "pairs",
        "matches its arm",
        "why",
    ]
    tiered = summary.tiered
    if tiered is None:
        return header, []
    rows = [
        [
            name,
            _routed(check),
            interval_text(check.vs_baseline),
            interval_text(check.vs_speculative),
            interval_text(check.speculative_vs_baseline),
            str(check.vs_baseline.n),
            HELD[check.held],
            check.reason,
        ]
        for name, check in sorted(tiered.by_class.items())
    ]
    return header, rows


def _cores(cores: list[int]) -> str:
    return ",".join(map(str, cores)) or "none"


def gateway_text(cost: GatewayCost) -> str:
    """The gateway's own cost in one line: CPU and added latency per request, the cores it
    ran on against the servers', and whether it shared one (unavoidable when the servers
    may run on every core, as on 2 cores)."""
    cpu = "n/a" if cost.cpu_ms_per_request is None else f"{cost.cpu_ms_per_request:.2f} ms"
    through, upstream, added = (
        cost.downstream_mean_ms,
        cost.upstream_mean_ms,
        cost.added_ms_per_request,
    )
    if through is None or upstream is None or added is None:
        latency = "added latency not measured (no request in its histograms)"
    else:
        latency = (
            f"added {added:.2f} ms per request (mean {through:.2f} ms through it - "
            f"{upstream:.2f} ms on the servers)"
        )
    servers = ", ".join(f"{arm} {_cores(cores)}" for arm, cores in cost.server_cores.items())
    shared = cost.shared_with()
    if not shared:
        where = "it shares no core with a server"
    else:
        where = f"it shares a core with {' and '.join(shared)}"
        if cost.must_share():
            where += (
                f" (unavoidable here: the servers may run on all {len(cost.machine_cores)} "
                "cores of the run, so the tiered figures include its cost)"
            )
    binding = f" (cpu_binding {cost.cpu_binding})" if cost.cpu_binding else ""
    return (
        f"gateway cost during the tiered arm: {cpu} CPU per request ({cost.cpu_s:.2f} s over "
        f"{cost.requests} requests), {latency}; gateway on cores {_cores(cost.gateway_cores)}, "
        f"servers{binding}: {servers}; {where}"
    )


def _gateway(summary: RunSummary) -> str:
    cost = summary.tiered.gateway if summary.tiered is not None else None
    return "gateway cost: not measured in this run" if cost is None else gateway_text(cost)


def _lossless(lossless: Lossless) -> str:
    if lossless.exact_match_rate is None:
        return "lossless not computable (no prompt succeeded on the tiered arm and the baseline)"
    text = (
        f"lossless (tiered output == baseline output): {lossless.exact_match_rate:.0%} "
        f"({lossless.exact_matches}/{lossless.prompts_compared} prompts)"
    )
    if lossless.prefix_agreement_rate is not None:
        text += f", prefix agreement {lossless.prefix_agreement_rate:.1%}"
    return text + (f" ({lossless.note})" if lossless.note else "")


def tiered_text(summary: RunSummary) -> str | None:
    """What the tiered arm is, its failures and its lossless check, in a few lines; None
    when the run did not drive it."""
    tiered = summary.tiered
    arm = summary.arms.get("tiered")
    if tiered is None or arm is None:
        return None
    overall = arm.overall
    speculative = ", ".join(tiered.routing.speculative_classes) or "none"
    failures = (
        f"{overall.failed} failed {overall.failures_by_reason}" if overall.failed else "0 failed"
    )
    return "\n".join(
        [
            f"Tiered arm ({arm.label}): the gateway at {arm.url}, routing on the "
            f"{tiered.routing.class_header} header every request carries, SD classes: "
            f"{speculative}; the same schedule after the serving arms, alone. Pairs: the same "
            "prompt; a speedup > 1 means the tiered arm is faster.",
            f"requests: {overall.succeeded} of {overall.requests} succeeded, {failures}; "
            f"{tiered.unpaired} unpaired with the baseline.",
            _lossless(tiered.lossless),
            _gateway(summary),
        ]
    )


def tiered_lines(summary: RunSummary) -> list[str]:
    """The per-class check in one line each (the local run's log and local_run.md)."""
    if summary.tiered is None:
        return []
    lines = []
    for name, check in sorted(summary.tiered.by_class.items()):
        lines.append(
            f"tiered, {name} prompts (routed to {_routed(check)}): vs baseline "
            f"{interval_text(check.vs_baseline, '{:.2f}')}, vs SD "
            f"{interval_text(check.vs_speculative, '{:.2f}')}, n={check.vs_baseline.n}: "
            f"{HELD[check.held]} ({check.reason})"
        )
    return [*lines, _gateway(summary)]
