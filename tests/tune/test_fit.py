"""python -m tune fit: the model from load-test run directories written with the load test's
own writers (RunInfo + analysis_info for run.json, write_records for the records), holding
servers whose step cost and acceptance are known exactly (synthetic_runs)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest
from synthetic_runs import BASE_STEP, C0, C1, make_run

from experiment import build_config
from experiment.config import Arm, ExperimentConfig
from loadtest.analysis import analysis_info
from loadtest.client import RequestParams
from loadtest.records import RequestRecord, write_records
from loadtest.results import LoadShapeInfo, RequestInfo, RunInfo, SloInfo
from loadtest.summary import RUN_JSON
from tune.__main__ import main
from tune.fit import fit_from_run_dirs
from tune.predict import PredictionError
from tune.report import TUNE_JSON, read_result
from tune.results import Run, Setting

URLS = {Arm.BASELINE.value: "http://baseline:8000", Arm.SPECULATIVE.value: "http://cand:8000"}


def _config(k: int = 4) -> ExperimentConfig:
    config = build_config({})
    serving = config.serving.model_copy(update={"num_speculative_tokens": k})
    return config.model_copy(update={"serving": serving})


def _records(run: Run, arm: Arm) -> list[RequestRecord]:
    """A tune Run's samples as the load test's records, in one schedule (index = position)."""
    records, clock = [], 1_700_000_000.0
    samples = [s for name in sorted(run.classes) for s in run.classes[name].samples]
    for index, s in enumerate(samples):
        records.append(
            RequestRecord(
                arm=arm.value,
                index=index,
                prompt_id=s.prompt_id,
                prompt_class=s.prompt_id.rsplit("-", 1)[0],
                max_tokens=s.output_tokens or 0,
                wall_start=clock,
                start=clock,
                ttft_s=s.ttft_s,
                e2e_s=s.e2e_s,
                chunk_times=list(s.chunk_times_s),
                chunk_tokens=list(s.chunk_tokens),
                chunk_texts=["x"] * len(s.chunk_tokens),
                output_tokens=s.output_tokens,
            )
        )
        clock += (s.e2e_s or 0.0) + 0.01
    return records


def write_run_dir(root: Path, name: str, k: int, concurrency: int = 1, slow: float = 1.0) -> Path:
    """A comparison run directory (baseline vs a candidate with window k), written by the
    load test's own writers."""
    run_dir = root / name
    run_dir.mkdir()
    config = _config(k)
    params = RequestParams(model=config.serving.target_model, max_tokens=401)
    info = RunInfo(
        started_at="2026-01-01T00:00:00Z",
        model=params.model,
        urls=URLS,
        variant_labels={a.value: label for a, label in config.loadtest.variant_labels.items()},
        request=RequestInfo.model_validate(asdict(params)),
        load_shape=LoadShapeInfo(concurrency=concurrency, max_duration_s=60.0),
        measured_requests=8,
        warmup_requests=0,
        seed=0,
        slo=SloInfo.model_validate(config.loadtest.slo.model_dump()),
        analysis=analysis_info(config),
    )
    (run_dir / RUN_JSON).write_text(json.dumps(info.model_dump(mode="json")))
    baseline = make_run(Setting(), "baseline", concurrency)  # slow: only the candidate
    candidate = make_run(Setting(draft="d", k=k), "fit", concurrency, slow=slow)
    write_records(run_dir / "records_baseline.jsonl", _records(baseline, Arm.BASELINE))
    write_records(run_dir / "records_speculative.jsonl", _records(candidate, Arm.SPECULATIVE))
    return run_dir


def test_fit_from_load_test_run_dirs_recovers_the_model_and_checks_held_out_k(
    tmp_path: Path,
) -> None:
    dirs = [write_run_dir(tmp_path, f"k{k}", k) for k in (2, 8, 4, 6)]
    config = _config()  # tuning.holdout_k defaults to [4, 6]
    result = fit_from_run_dirs(config, dirs, ["d"])
    assert result.target == "trn2" and result.plan is None
    assert [(i.run_dir, i.role) for i in result.inputs] == [
        ("k2", "baseline"),
        ("k2", "fit"),
        ("k8", "fit"),
        ("k4", "holdout"),
        ("k6", "holdout"),
    ]
    assert {m.prompt_class for m in result.models} == {"open_ended", "structured"}
    for model in result.models:
        assert model.step_cost.fit_k == [2, 8]
        assert model.step_cost.baseline_step_ms == pytest.approx(BASE_STEP * 1e3)
        assert model.step_cost.intercept_ms == pytest.approx(C0 * 1e3)
        assert model.step_cost.per_k_ms == pytest.approx(C1 * 1e3)
        assert model.acceptance.source == "client_chunks"
    assert any("no spec-decode counters" in note for note in result.notes)
    assert sorted((c.prompt_class, c.k) for c in result.checks) == [
        ("open_ended", 4),
        ("open_ended", 6),
        ("structured", 4),
        ("structured", 6),
    ]
    assert all(c.within_tolerance and c.measured.n == 4 for c in result.checks)
    overall = next(r for r in result.recommendations if r.scope == "all")
    assert result.overrides == (
        f"-c experiment.serving.draft_model=d -c experiment.serving.num_speculative_tokens="
        f"{overall.k}"
    )


def test_candidates_at_higher_concurrency_give_break_even_and_cost(tmp_path: Path) -> None:
    dirs = [write_run_dir(tmp_path, f"k{k}", k) for k in (2, 8)]
    dirs.append(write_run_dir(tmp_path, "k8-c4", 8, concurrency=4, slow=3.0))
    result = fit_from_run_dirs(_config(), dirs, ["d"])
    assert ("k8-c4", "baseline", 4) in [(i.run_dir, i.role, i.concurrency) for i in result.inputs]
    assert {b.prompt_class for b in result.break_even} == {"open_ended", "structured"}
    for block in result.break_even:
        assert [c for c, _ in block.points] == [1, 4]
        assert block.points[1][1].point < 1 < block.points[0][1].point
    assert result.cost is not None
    assert result.cost.basis.target == "trn2"
    assert [p.concurrency for p in result.cost.arms[1].points] == [1, 4]


def test_cli_writes_tune_json_and_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dirs = [write_run_dir(tmp_path, f"k{k}", k) for k in (2, 8, 4)]
    out = tmp_path / "fit"
    code = main(["fit", *map(str, dirs), "--draft", "d", "--out", str(out)])
    assert code == 0
    result = read_result(out)
    assert (out / TUNE_JSON).is_file() and (out / "tune.md").is_file()
    assert [c.k for c in result.checks] == [4, 4]
    assert "paste: -c experiment.serving.draft_model=d" in capsys.readouterr().out


def test_bad_inputs_are_clear_errors(tmp_path: Path) -> None:
    dirs = [write_run_dir(tmp_path, f"k{k}", k) for k in (2, 8)]
    with pytest.raises(PredictionError, match="one --draft per candidate"):
        fit_from_run_dirs(_config(), dirs, ["a", "b", "c"])
    busy = write_run_dir(tmp_path, "busy", 2, concurrency=2)
    with pytest.raises(PredictionError, match="one request at a time"):
        fit_from_run_dirs(_config(), [busy, *dirs], ["d"])
    with pytest.raises(PredictionError, match="not a load-test run directory"):
        fit_from_run_dirs(_config(), [tmp_path, *dirs], ["d"])
    # A run of an older load test (no analysis block in run.json) has no k to fit with.
    old = write_run_dir(tmp_path, "old", 4)
    run = json.loads((old / "run.json").read_text())
    del run["analysis"]
    (old / "run.json").write_text(json.dumps(run))
    with pytest.raises(PredictionError, match=r"records no k .*measure it again"):
        fit_from_run_dirs(_config(), [*dirs, old], ["d"])
    # An arm that never ran wrote no records.
    (dirs[1] / "records_speculative.jsonl").unlink()
    with pytest.raises(PredictionError, match=r"no records_speculative\.jsonl; was the arm run"):
        fit_from_run_dirs(_config(), dirs, ["d"])
    assert main(["fit", str(dirs[0])]) == 2
