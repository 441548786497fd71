"""The load generator's side of a run as rows of strings: workers, their CPU, their clocks.

Whether a run's latencies can be trusted depends on the client too: a busy Locust process
stamps late, workers' wall clocks may disagree (window and throughput), and a read without a
kernel timestamp includes the client's own delay before it ran ``recv``. Shared by the
console, Markdown and HTML renderers like ``tables``. Missing values read ``n/a``.
"""

from __future__ import annotations

from loadtest.render.decision import NOT_AVAILABLE, Table
from loadtest.results import ArmSummary, RunSummary
from loadtest.summary import LOAD_GENERATOR_CPU_WARNING, skew_warning_ms


def _workers(arm: ArmSummary) -> str:
    return "1 (one process)" if arm.workers == 1 else str(arm.workers)


def _cpu(arm: ArmSummary) -> str:
    def share(value: float | None) -> str:
        if value is None:
            return NOT_AVAILABLE
        busy = " (busy)" if value > LOAD_GENERATOR_CPU_WARNING else ""
        return f"{value:.0%}{busy}"

    if not arm.worker_cpu:  # one process: its own share
        return share(arm.load_generator_cpu)
    return ", ".join(f"#{index} {share(value)}" for index, value in arm.worker_cpu.items())


def _lost(arm: ArmSummary) -> str:
    if not arm.lost_workers:
        return "none"
    return ", ".join(f"#{index}" for index in arm.lost_workers)


def _skew(arm: ArmSummary, bound_ms: float) -> str:
    if arm.clock_skew_ms is None:
        return "n/a (one process)" if arm.workers == 1 else NOT_AVAILABLE
    text = f"{arm.clock_skew_ms:.1f} ms"
    if arm.clock_skew_ms > bound_ms:
        text += f" (over {bound_ms:g} ms: window and throughput off by up to that)"
    return text


def _stamps(arm: ArmSummary) -> str:
    stamps = arm.arrival_stamps
    if stamps is None:
        return "n/a (not recorded)"
    reads = stamps.kernel + stamps.user
    if reads == 0:
        return "no reads"
    return f"{stamps.kernel / reads:.1%} of {reads} reads"


def load_generator_rows(summary: RunSummary) -> Table:
    """One column per arm: how many Locust workers drove it, each worker's share of its
    core, lost workers, the workers' clock skew (and whether it is over the warning bound)
    and the share of reads whose arrival the kernel stamped."""
    arms = list(summary.arms.values())
    bound = skew_warning_ms(summary.run)
    rows = [
        ["Locust workers", *(_workers(a) for a in arms)],
        ["CPU share of a core, per worker", *(_cpu(a) for a in arms)],
        ["lost workers", *(_lost(a) for a in arms)],
        ["wall-clock skew between workers", *(_skew(a, bound) for a in arms)],
        ["arrivals stamped by the kernel", *(_stamps(a) for a in arms)],
    ]
    return ["load generator", *(a.label for a in arms)], rows
