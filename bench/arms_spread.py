"""How far identical local runs spread, per arms mode: ``python -m bench.arms_spread``.

Runs the cached local comparison (``python -m local_run``) ``--runs`` times per mode of
``--modes``, interleaved (sequential, alternating, sequential, ...) so a drift of the machine
over the measurement falls on every mode alike, and writes the structured and open-ended E2E
speedups (with their intervals) of every run to ``--out``: the figures of the record
``arms-spread`` (``python -m bench.figures measure arms-spread``). The spread of a mode is
max - min of its runs' estimates; the local run's default ``local.arms_mode`` is the mode
whose spread is smaller for both classes (docs/local-run.md renders it from the record).

``--lock FILE`` (default ``$BENCH_LOCK``) runs each local run under ``flock FILE``, so on
a shared machine no other heavy job runs beside it; the runs stay in their order.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.figures.records import ROOT, ArmsSpreadFigures, ArmsSpreadRun, Interval
from experiment.config import ArmsMode
from loadtest.results import Interval as SummaryInterval
from loadtest.results import RunSummary

CLASSES = ("structured", "open_ended")
DEFAULT_OUT = "runs/figures/arms-spread.json"


def local_run_command(overrides: list[str], runs_dir: str, lock: str | None) -> list[str]:
    """The cached local run with ``overrides`` (``local.x=y``), writing under ``runs_dir``."""
    settings = [*overrides, f"local.runs_dir={runs_dir}"]
    command = [sys.executable, "-m", "local_run", *(a for s in settings for a in ("-c", s))]
    return ["flock", lock, *command] if lock else command


def record_interval(found: SummaryInterval, where: Path) -> Interval:
    """A summary's speedup interval as a record's (an estimate is required)."""
    if found.estimate is None:
        raise ValueError(f"{where}: a speedup without an estimate")
    return Interval(estimate=found.estimate, low=found.low, high=found.high, n=found.n)


def read_run(run_dir: Path, mode: str, turn: int, ok: bool, wall_s: float) -> ArmsSpreadRun:
    """The figures of one local run from its summary.json."""
    path = run_dir / "summary.json"
    summary = RunSummary.model_validate_json(path.read_text())
    if summary.statistics is None:
        raise ValueError(f"{path} has no paired statistics")
    if summary.run.arms_mode != mode:
        raise ValueError(f"{path} ran {summary.run.arms_mode} arms, not {mode}")
    by_class = summary.statistics.by_class
    timing = summary.arms_timing
    return ArmsSpreadRun(
        mode=mode,
        turn=turn,
        ok=ok,
        wall_s=wall_s,
        e2e_speedup={
            c: record_interval(by_class[c].speedup["e2e_ms"]["mean"], path) for c in CLASSES
        },
        load_test_s=timing.run_elapsed_s if timing else None,
        locust_overhead_s=(
            sum(timing.arms_elapsed_s.values()) - sum(a.window_s for a in summary.arms.values())
            if timing
            else None
        ),
    )


def newest_run(runs_dir: Path, since: float) -> Path:
    """The local run under ``runs_dir`` that wrote its summary after ``since`` (epoch s)."""
    found = [p.parent for p in runs_dir.glob("*/summary.json") if p.stat().st_mtime >= since - 1]
    if not found:
        raise ValueError(f"no local run wrote a summary.json under {runs_dir}")
    return max(found, key=lambda p: p.stat().st_mtime)


@dataclass(frozen=True)
class Turn:
    """One local run of an interleaved sequence: the setting's value it ran with."""

    value: str
    turn: int
    run_dir: Path  # the run's own directory (newest_run under the turn's runs_dir)
    ok: bool  # the local run exited 0
    wall_s: float  # flock's wait included: see the record's machine


def interleaved_runs(
    setting: str, values: list[str], runs: int, out_dir: Path, lock: str | None, label: str
) -> Iterator[Turn]:
    """The cached local run ``runs`` times per value of ``local.<setting>``, interleaved (a,
    b, a, b, ...) so a drift of the machine falls on every value alike."""
    order = [value for _ in range(runs) for value in values]
    for turn, value in enumerate(order):
        runs_dir = out_dir / f"{value}-{turn // len(values)}"
        shown = os.path.relpath(runs_dir, ROOT) if runs_dir.is_relative_to(ROOT) else runs_dir
        print(f"{label}: run {turn + 1} of {len(order)}, {value} -> {shown}", flush=True)
        began, started = time.monotonic(), time.time()
        command = local_run_command([f"local.{setting}={value}"], str(runs_dir), lock)
        code = subprocess.run(command, cwd=ROOT).returncode
        wall_s = time.monotonic() - began
        yield Turn(value, turn, newest_run(runs_dir, started), code == 0, wall_s)


def measure(
    modes: list[str], runs: int, out_dir: Path, lock: str | None, block_requests: int
) -> ArmsSpreadFigures:
    results = [
        read_run(t.run_dir, t.value, t.turn, t.ok, t.wall_s)
        for t in interleaved_runs("arms_mode", modes, runs, out_dir, lock, "arms spread")
    ]
    return ArmsSpreadFigures(block_requests=block_requests, runs=results)


def spread_lines(figures: ArmsSpreadFigures) -> list[str]:
    return [
        f"{mode}: " + ", ".join(
            f"{c} {' '.join(f'{v:.2f}' for v in figures.estimates(mode, c))} "
            f"(spread {figures.spread(mode, c):.2f})"
            for c in CLASSES
        )
        for mode in figures.modes()
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    from experiment import build_config

    parser = argparse.ArgumentParser(prog="python -m bench.arms_spread", description=__doc__)
    parser.add_argument("--runs", type=int, default=3, help="local runs per mode (default 3)")
    parser.add_argument(
        "--modes",
        default=f"{ArmsMode.SEQUENTIAL.value},{ArmsMode.ALTERNATING.value}",
        help="arms modes to compare, in the order each round runs them",
    )
    parser.add_argument("--out", default=DEFAULT_OUT, help="the figures file to write")
    parser.add_argument(
        "--lock",
        default=os.environ.get("BENCH_LOCK") or None,
        help="run each local run under flock FILE (default $BENCH_LOCK; none when unset)",
    )
    args = parser.parse_args(argv)
    modes = [ArmsMode(m.strip()).value for m in args.modes.split(",") if m.strip()]
    if args.runs < 2 or not modes:
        parser.error("a spread needs --runs 2 or more and at least one mode")
    out = Path(args.out)
    out = out if out.is_absolute() else ROOT / out
    block = build_config({}).loadtest.alternating_block_requests
    figures = measure(modes, args.runs, out.with_suffix(""), args.lock, block)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(figures.model_dump_json(indent=1) + "\n")
    for line in spread_lines(figures):
        print(line)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
