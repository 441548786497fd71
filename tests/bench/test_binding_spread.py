"""The binding-spread record (python -m bench.binding_spread): the runs it starts and what
docs/local-run.md renders from it against the hosts on record."""

from __future__ import annotations

import pytest

from bench.arms_spread import local_run_command
from bench.binding_spread import BINDINGS, main
from bench.figures.records import (
    BindingRun,
    BindingSpreadFigures,
    FigureRecord,
    HostClassFigures,
    HostRun,
    Interval,
    LocalHostsFigures,
    Provenance,
    RecordMachine,
)
from bench.figures.regions import binding_spread

MACHINE = RecordMachine(cpu="AMD EPYC", cores=2, load_average_start=1.0)


def _costs(ratio: float, agrees: bool | None = True) -> HostClassFigures:
    return HostClassFigures(
        baseline_step_ms=19.0, speculative_step_ms=19.0 * ratio,
        draft_cost_per_step_ms=19.0 * (ratio - 1), step_ratio=ratio, tokens_per_step=5.8,
        baseline_ttft_ms=70.0, speculative_ttft_ms=80.0, output_tokens=128.0,
        predicted=Interval(estimate=3.0, low=2.8, high=3.2, n=16), agrees=agrees,
    )  # fmt: skip


def _speedups(structured: float) -> dict[str, Interval]:
    return {
        "structured": Interval(
            estimate=structured, low=structured - 0.5, high=structured + 0.5, n=16
        ),
        "open_ended": Interval(estimate=1.1, low=1.0, high=1.2, n=16),
    }  # fmt: skip


def _record(name: str, figures: BindingSpreadFigures | LocalHostsFigures) -> FigureRecord:
    return FigureRecord(
        name=name, date="2026-11-27T16:00:00Z", machine=MACHINE, command="x",
        remeasure=f"python -m bench.figures measure {name}",
        provenance=Provenance(kind="measured", commit="abc1234"), figures=figures,
    )  # fmt: skip


def _records(runs: list[BindingRun]) -> dict[str, FigureRecord]:
    host = HostRun(
        record="make-local", source="measured", date="2026-11-27T15:00:00Z", commit="abc1234",
        machine=MACHINE, e2e_speedup=_speedups(3.2),
        acceptance_by_class={"structured": 0.688, "open_ended": 0.137},
        host_expectation={"structured": _costs(1.65), "open_ended": _costs(1.65)},
    )  # fmt: skip
    reported = host.model_copy(
        update={"source": "reported", "record": "elsewhere", "host_expectation": None,
                "e2e_speedup": _speedups(2.45)}
    )  # fmt: skip
    return {
        "binding-spread": _record("binding-spread", BindingSpreadFigures(runs=runs)),
        "local-hosts": _record("local-hosts", LocalHostsFigures(runs=[host, reported])),
    }


def _run(binding: str, turn: int, ratio: float, ok: bool = True) -> BindingRun:
    return BindingRun(
        binding=binding, turn=turn, ok=ok, wall_s=220.0, e2e_speedup=_speedups(3.0),
        host_expectation={"structured": _costs(ratio), "open_ended": _costs(ratio, False)},
    )  # fmt: skip


def test_the_region_sets_the_bindings_spread_against_the_hosts() -> None:
    runs = [_run("apart", 0, 1.65), _run("isolated", 1, 1.9), _run("shared", 2, 2.1, ok=False)]
    text = binding_spread(_records(runs))
    assert "| apart | 19.0 ms | 1.65 / 1.65 |" in text
    assert "| shared (run failed its checks) |" in text
    assert "3.00x within / 3.00x **outside**" in text
    assert "step ratio was 1.65-2.10 (apart 1.65; isolated 1.90; shared 2.10)" in text
    assert "The bindings' means differ by 0.45" in text
    assert "1 run(s) per binding" in text
    # The reported run without costs enters through the ratio the relation implies.
    hosts = text.split("the default runs on record span ")[1]
    low, high = (float(v) for v in hosts.split(" ")[0].split("-"))
    assert low == pytest.approx(1.65) and 2.0 < high < 2.6


def test_each_run_sets_its_binding_and_its_own_directory() -> None:
    command = local_run_command(["local.cpu_binding=isolated"], "runs/b/isolated-0", None)
    assert command[-4:] == [
        "-c", "local.cpu_binding=isolated", "-c", "local.runs_dir=runs/b/isolated-0"
    ]  # fmt: skip
    assert BINDINGS == ("apart", "isolated", "shared")


def test_an_unknown_binding_is_refused_with_the_ones_there_are(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["--bindings", "apart,pinned"])
    assert "--bindings takes ('apart', 'isolated', 'shared') (got ['pinned'])" in (
        capsys.readouterr().err
    )


def test_bindings_inside_the_run_to_run_noise_are_called_so() -> None:
    runs = [
        _run("apart", 0, 1.45), _run("isolated", 1, 1.85), _run("apart", 2, 1.75),
        _run("isolated", 3, 1.55),
    ]  # fmt: skip
    text = binding_spread(_records(runs))
    assert "The rounds of one binding differ by up to 0.30, the bindings' means by 0.10" in text
    assert "no binding stands out of the run-to-run noise" in text
    # open-ended's costs do not explain it in any run
    assert "explain its speedup within their interval in 4 of 8 class runs" in text


def test_bindings_beyond_the_run_to_run_noise_are_called_so() -> None:
    # The opposite numbers of the test above: each binding's rounds agree within 0.05, the
    # bindings' means 0.40 apart.
    runs = [
        _run("apart", 0, 1.45), _run("isolated", 1, 1.85), _run("apart", 2, 1.50),
        _run("isolated", 3, 1.90),
    ]  # fmt: skip
    text = binding_spread(_records(runs))
    assert "The bindings' means differ by 0.40, more than the rounds of one binding" in text
    assert "on 2 cores the core placement moves the step ratio beyond the run-to-run noise" in text
    assert "`apart` gives the lowest (1.48 on average)" in text
    assert "no binding stands out" not in text


def test_one_run_per_binding_cannot_tell_placement_from_noise() -> None:
    text = binding_spread(_records([_run("apart", 0, 1.45), _run("isolated", 1, 1.85)]))
    assert "this record cannot tell the core placement from the noise" in text
    assert "no binding stands out" not in text and "moves the step ratio" not in text
