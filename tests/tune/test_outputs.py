"""tune.json round trip, the published schema, the report and its plots, the -c line."""

from __future__ import annotations

import json
from pathlib import Path

from synthetic_runs import BOOT, make_run, sweep

from loadtest.results import PriceBasis
from tune.analysis import (
    break_even_by_class,
    class_model,
    cost_at_load,
    holdout_checks,
    recommend,
)
from tune.overrides import overrides_line
from tune.report import TUNE_JSON, read_result, write_outputs
from tune.results import LocalPlan, Setting, TuneResult, tune_json_schema

SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "schemas" / "tune.schema.json"


def _result() -> TuneResult:
    runs = sweep()
    setting = Setting(draft="d", k=4)
    runs += [make_run(Setting(), "baseline", 2), make_run(setting, "break_even", 2, slow=1.3)]
    basis = PriceBasis(
        target="local",
        instance_type="c7i.large",
        capacity_type="local",
        instance_usd_per_hour=0.09,
        devices_claimed=1,
        devices_per_instance=1,
        source="test price",
        as_of="2026-01-01",
        nominal=True,
    )
    models = [class_model(runs, "d", n, [2, 8], 10, BOOT)[0] for n in ("open_ended", "structured")]
    plan = LocalPlan(
        runs=[(Setting(), "baseline", [1, 2])],
        server_starts=1,
        requests=8,
        estimated_s=60,
        budget_s=1200,
        predicted_k=[1, 3],
    )
    return TuneResult(
        target="local",
        tolerance=0.15,
        plan=plan,
        runs=runs,
        models=models,
        checks=holdout_checks(models, runs, 0.15),
        recommendations=recommend(models, runs, {"open_ended": 4, "structured": 4}, BOOT),
        break_even=break_even_by_class(runs, setting, 4, BOOT),
        cost=cost_at_load(runs, setting, basis),
        overrides=overrides_line("local", "d", 4),
        load_average=[1.0, 2.0, 3.0],
    )


def test_outputs_are_written_and_tune_json_round_trips(tmp_path: Path) -> None:
    result = _result()
    paths = write_outputs(result, tmp_path)
    assert read_result(tmp_path) == result
    assert json.loads((tmp_path / TUNE_JSON).read_text())["schema_version"] == 5
    for name in ("speedup_vs_k.png", "acceptance_per_position.png", "break_even.png"):
        assert paths[name].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = paths["markdown"].read_text()
    assert "## Held-out checks" in text
    assert "| d | structured | 4 |" in text
    assert "-c experiment.local.num_speculative_tokens=" in text
    assert "(extrapolated)" in text
    assert "- tokens per step tau(k): replay of the k=8 run's chunks" in text
    assert "| d k=4 | holdout | 1 | 8 / 8 | 0 |" in text
    assert "load average (1/5/15 min) at the end: 1.00, 2.00, 3.00" in text
    assert "| baseline | 2 |" in text and "NOMINAL price" in text
    # held-out components: T(4) = 12 + 2*4 ms predicted and measured
    assert "| d | structured | 4 | 3.25 / 3.25 (+0%) | 20.00 / 20.00 (+0%) |" in text
    for block in result.break_even:
        assert block.prompt_class in text


def test_published_schema_is_the_generated_one() -> None:
    assert json.loads(SCHEMA.read_text()) == tune_json_schema(), (
        "docs/schemas/tune.schema.json is stale: python -m tune schema > "
        "docs/schemas/tune.schema.json"
    )


def test_overrides_line_for_each_target() -> None:
    assert overrides_line("trn2", "Qwen/Qwen3-1.7B", 7) == (
        "-c experiment.serving.draft_model=Qwen/Qwen3-1.7B "
        "-c experiment.serving.num_speculative_tokens=7"
    )
    assert overrides_line("local", "small", 3) == (
        "-c experiment.local.drafter=draft-model -c experiment.local.generator.draft=small "
        "-c experiment.local.num_speculative_tokens=3"
    )
    assert overrides_line("local", "eagle3", 4) == (
        "-c experiment.local.drafter=eagle3 -c experiment.local.num_speculative_tokens=4"
    )
