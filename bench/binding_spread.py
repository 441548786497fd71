"""Which process gets which core, and what it does to the miniature's figures:
``python -m bench.binding_spread``.

The local run's step ratio (a speculative step's price in plain steps, loadtest.expected)
is the host's part of the speedup, but on two cores it is also the run's own: the servers'
compute, their API servers and engine cores, and the load generator share those cores, and
``local.cpu_binding`` decides how (experiment/config/local.py). This runs the cached default
local run once per binding of ``--bindings``, ``--runs`` rounds interleaved (apart,
isolated, shared, apart, ...) so a drift of the machine falls on every binding alike, and
writes each run's step costs, predicted and measured E2E speedups to ``--out``: the figures
of the record ``binding-spread`` (``python -m bench.figures measure binding-spread``).
Set against the spread between hosts (record ``local-hosts``), it says how much of that
spread the binding alone can move.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import get_args

from bench.arms_spread import interleaved_runs, record_interval
from bench.figures.measure import host_expectation_figures
from bench.figures.records import ROOT, BindingRun, BindingSpreadFigures
from experiment.config.local import CpuBinding
from loadtest.results import RunSummary

CLASSES = ("structured", "open_ended")
DEFAULT_OUT = "runs/figures/binding-spread.json"
BINDINGS: tuple[str, ...] = get_args(CpuBinding)


def read_run(run_dir: Path, binding: str, turn: int, ok: bool, wall_s: float) -> BindingRun:
    """One local run's figures from its summary.json and local_run.json."""
    summary = RunSummary.model_validate_json((run_dir / "summary.json").read_text())
    local = json.loads((run_dir / "local_run.json").read_text())
    if summary.statistics is None:
        raise ValueError(f"{run_dir}/summary.json has no paired statistics")
    costs = host_expectation_figures(local["headline"].get("host_expectation") or [])
    if costs is None or set(costs) != set(CLASSES):
        raise ValueError(f"{run_dir}/local_run.json kept no step costs for {CLASSES}")
    by_class = summary.statistics.by_class
    measured = {
        name: record_interval(by_class[name].speedup["e2e_ms"]["mean"], run_dir) for name in CLASSES
    }
    return BindingRun(
        binding=binding,
        turn=turn,
        ok=ok,
        wall_s=wall_s,
        e2e_speedup=measured,
        host_expectation=costs,
        memory_bandwidth_gbs=local.get("machine", {}).get("memory_bandwidth_gbs"),
    )


def measure(
    bindings: list[str], runs: int, out_dir: Path, lock: str | None
) -> BindingSpreadFigures:
    turns = interleaved_runs("cpu_binding", bindings, runs, out_dir, lock, "binding spread")
    return BindingSpreadFigures(
        runs=[read_run(t.run_dir, t.value, t.turn, t.ok, t.wall_s) for t in turns]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.binding_spread", description=__doc__)
    parser.add_argument("--runs", type=int, default=1, help="rounds over the bindings (1)")
    parser.add_argument(
        "--bindings",
        default=",".join(BINDINGS),
        help=f"local.cpu_binding values, in the order each round runs them ({BINDINGS})",
    )
    parser.add_argument("--out", default=DEFAULT_OUT, help="the figures file to write")
    parser.add_argument(
        "--lock",
        default=os.environ.get("BENCH_LOCK") or None,
        help="run each local run under flock FILE (default $BENCH_LOCK; none when unset)",
    )
    args = parser.parse_args(argv)
    bindings = [b.strip() for b in args.bindings.split(",") if b.strip()]
    unknown = sorted(set(bindings) - set(BINDINGS))
    if unknown or not bindings or args.runs < 1:
        parser.error(f"--bindings takes {BINDINGS} (got {unknown or 'none'}); --runs >= 1")
    out = Path(args.out)
    out = out if out.is_absolute() else ROOT / out
    figures = measure(bindings, args.runs, out.with_suffix(""), args.lock)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(figures.model_dump_json(indent=1) + "\n")
    for run in figures.runs:
        ratios = " / ".join(f"{run.host_expectation[c].step_ratio:.2f}" for c in CLASSES)
        print(
            f"{run.binding}: step ratio {ratios}, E2E "
            + " / ".join(f"{run.e2e_speedup[c].estimate:.2f}x" for c in CLASSES)
        )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
