"""The arms-spread record (python -m bench.arms_spread): the runs it starts, the spread per
mode, the mode it chooses and the text docs/local-run.md renders from it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import bench.arms_spread as spread_bench
from bench.arms_spread import local_run_command, spread_lines
from bench.figures.records import (
    ArmsSpreadFigures,
    ArmsSpreadRun,
    FigureRecord,
    Interval,
    Provenance,
    RecordMachine,
    load_records,
)
from bench.figures.regions import CLASSES, arms_spread
from experiment.config import ArmsMode


def _run(mode: str, turn: int, structured: float, open_ended: float) -> ArmsSpreadRun:
    return ArmsSpreadRun(
        mode=mode, turn=turn, ok=True, wall_s=200.0 + turn,
        e2e_speedup={
            "structured": Interval(estimate=structured, low=structured - 0.5,
                                   high=structured + 0.5, n=16),
            "open_ended": Interval(estimate=open_ended, low=open_ended - 0.2,
                                   high=open_ended + 0.2, n=16),
        },
        load_test_s=150.0 + turn, locust_overhead_s=(30.0 if mode == "alternating" else 8.0) + turn,
    )  # fmt: skip


def _figures(alternating: list[tuple[float, float]]) -> ArmsSpreadFigures:
    sequential = [(3.0, 1.0), (3.4, 1.2), (2.8, 0.95)]
    runs = []
    for i, (seq, alt) in enumerate(zip(sequential, alternating, strict=True)):
        runs += [_run("sequential", 2 * i, *seq), _run("alternating", 2 * i + 1, *alt)]
    return ArmsSpreadFigures(block_requests=8, runs=runs)


def _records(figures: ArmsSpreadFigures) -> dict[str, FigureRecord]:
    record = FigureRecord(
        name="arms-spread", date="2026-11-25T16:00:00Z",
        machine=RecordMachine(cpu="AMD EPYC", cores=2, load_average_start=1.0),
        command=".venv/bin/python -m bench.arms_spread", remeasure="python -m bench.figures "
        "measure arms-spread", provenance=Provenance(kind="measured", commit="abc1234"),
        figures=figures,
    )  # fmt: skip
    return {"arms-spread": record}


def test_spread_is_max_minus_min_and_the_tighter_mode_is_chosen() -> None:
    tight = _figures([(3.1, 1.05), (3.2, 1.1), (3.0, 1.0)])
    assert tight.spread("sequential", "structured") == pytest.approx(0.6)
    assert tight.spread("alternating", "open_ended") == pytest.approx(0.1)
    assert tight.chosen("alternating", "sequential", CLASSES) == "alternating"
    text = arms_spread(_records(tight))
    assert "this record chose **alternating**" in text
    assert "| alternating (blocks of 8) | open-ended |" in text and "**0.10** |" in text
    assert "took 8-12 s of a 150-154 s load test sequential; 31-35 s of a 151-155 s" in text
    assert "sequential: structured 3.00 3.40 2.80 (spread 0.60)" in spread_lines(tight)[0]


def test_a_mode_tighter_for_one_class_only_keeps_sequential() -> None:
    mixed = _figures([(3.1, 0.7), (3.2, 1.3), (3.0, 1.0)])  # open-ended spreads 0.6 > 0.25
    assert mixed.chosen("alternating", "sequential", CLASSES) == "sequential"
    text = arms_spread(_records(mixed))
    assert "this record chose **sequential**" in text and "open-ended 0.60 vs 0.25" in text


def test_each_local_run_sets_the_mode_and_its_own_directory_and_may_wait_for_a_lock() -> None:
    command = local_run_command(["local.arms_mode=alternating"], "runs/x/alternating-0", None)
    assert command[:3] == [sys.executable, "-m", "local_run"]
    assert (
        "local.arms_mode=alternating" in command
        and "local.runs_dir=runs/x/alternating-0" in command
    )
    locked = local_run_command(["local.arms_mode=sequential"], "runs/x/sequential-0", "some.lock")
    assert locked[:2] == ["flock", "some.lock"] and locked[2:5] == [
        sys.executable,
        "-m",
        "local_run",
    ]
    assert ArmsMode("alternating") is ArmsMode.ALTERNATING


def test_the_region_says_which_tree_the_record_measured() -> None:
    # The record of b1e332c predates local.cpu_binding (b920cc1): it chose a mode for vLLM's
    # own binding, not today's default. The text must not present it as today's default.
    record = load_records()["arms-spread"]
    assert isinstance(record.figures, ArmsSpreadFigures)
    text = arms_spread({"arms-spread": record})
    assert "default" not in text.split("\n")[-1]


def test_interleaved_runs_alternate_the_values_each_in_its_own_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[list[str]] = []

    def fake_run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[bytes]:
        started.append(command)
        runs_dir = Path(command[-1].split("=", 1)[1])
        (runs_dir / "20260101-000000").mkdir(parents=True)
        (runs_dir / "20260101-000000" / "summary.json").write_text("{}")
        return subprocess.CompletedProcess(command, 1 if "b-1" in str(runs_dir) else 0)

    monkeypatch.setattr(spread_bench.subprocess, "run", fake_run)
    turns = list(spread_bench.interleaved_runs("cpu_binding", ["a", "b"], 2, tmp_path, None, "t"))
    assert [(t.value, t.turn, t.run_dir.parent.name, t.ok) for t in turns] == [
        ("a", 0, "a-0", True), ("b", 1, "b-0", True), ("a", 2, "a-1", True), ("b", 3, "b-1", False)
    ]  # fmt: skip
    assert all("local.cpu_binding=" + t.value in started[t.turn] for t in turns)
