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
from loadtest.step_model import PredictionError
from loadtest.summary import RUN_JSON
from tune.__main__ import main
from tune.fit import fit_from_run_dirs
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


# The SD arm's /metrics before and after its window, as the load test's window file records
# it, for the three kinds of server (the baseline's shows no spec-decode counters).
FORK: tuple[dict, dict] = ({}, {})  # the published vLLM 0.9 fork: no counters at all
FROZEN = {"num_drafts": 3.0, "num_draft_tokens": 24.0, "num_accepted_tokens": 9.0}
FROZEN_02X = (FROZEN, FROZEN)  # vllm-neuron 0.2.x: registered, never incremented


def live_1x(per_position: list[float], drafts: float = 100.0) -> tuple[dict, dict]:
    """vllm-neuron 1.x: counters that moved by ``drafts`` steps with these per-position rates."""
    accepted = drafts * sum(per_position)
    before = {
        "num_drafts": 0.0,
        "num_draft_tokens": 0.0,
        "num_accepted_tokens": 0.0,
        "num_accepted_tokens_per_pos": {str(i): 0.0 for i in range(len(per_position))},
    }
    after = {
        "num_drafts": drafts,
        "num_draft_tokens": drafts * len(per_position),
        "num_accepted_tokens": accepted,
        "num_accepted_tokens_per_pos": {str(i): drafts * r for i, r in enumerate(per_position)},
    }
    return before, after


def write_run_dir(
    root: Path,
    name: str,
    k: int,
    concurrency: int = 1,
    slow: float = 1.0,
    counters: tuple[dict, dict] = FORK,
    classes: tuple[str, ...] | None = None,
) -> Path:
    """A comparison run directory (baseline vs a candidate with window k), written by the
    load test's own writers; ``classes``: only those prompt classes (None: all)."""
    run_dir = root / name
    run_dir.mkdir(parents=True)
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
    for run in (baseline, candidate):
        run.classes = {n: c for n, c in run.classes.items() if classes is None or n in classes}
    write_records(run_dir / "records_baseline.jsonl", _records(baseline, Arm.BASELINE))
    write_records(run_dir / "records_speculative.jsonl", _records(candidate, Arm.SPECULATIVE))
    for arm, (before, after) in ((Arm.BASELINE, FORK), (Arm.SPECULATIVE, counters)):
        window = {"arm": arm.value, "metrics_before": before, "metrics_after": after}
        (run_dir / f"window_{arm.value}.json").write_text(json.dumps(window))
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
    # The fork's runs: no counters, so the labelled client-side estimate, and each input says so.
    assert any(
        "k8: no vllm:spec_decode_* counters" in note and "tokens each streamed chunk" in note
        for note in result.notes
    )
    assert [i.acceptance_source for i in result.inputs] == [
        None,
        "estimated",
        "estimated",
        "estimated",
        "estimated",
    ]
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


def test_frozen_counters_are_not_available_never_a_zero_acceptance(tmp_path: Path) -> None:
    """vllm-neuron 0.2.x: the counters exist and never move while the candidate decodes. The
    fit must not read them as 0% acceptance: it says "not available" and uses (labelled) the
    client's tokens per chunk, which give the same model as the fork's run."""
    frozen = [write_run_dir(tmp_path / "frozen", f"k{k}", k, counters=FROZEN_02X) for k in (2, 8)]
    fork = [write_run_dir(tmp_path / "fork", f"k{k}", k) for k in (2, 8)]
    result = fit_from_run_dirs(_config(), frozen, ["d"])
    assert [i.acceptance_source for i in result.inputs[1:]] == ["not available"] * 2
    assert any(
        "k8: server acceptance not available" in note and "frozen counters" in note
        for note in result.notes
    )
    reference = {m.prompt_class: m for m in fit_from_run_dirs(_config(), fork, ["d"]).models}
    for model in result.models:
        assert model.acceptance.source == "client_chunks"
        assert model.acceptance.acceptance_rate and model.acceptance.acceptance_rate > 0
        assert model.acceptance == reference[model.prompt_class].acceptance


def test_live_counters_of_one_class_feed_the_fit(tmp_path: Path) -> None:
    """vllm-neuron 1.x: live counters, per position too. A directory that measured one prompt
    class fits on them; counters over several classes mixed cannot be split by class, so
    the fit says so and uses the client's chunks for each class."""
    rates = [0.9, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1]
    live = [
        write_run_dir(
            tmp_path / "one",
            f"k{k}",
            k,
            counters=live_1x(rates[:k]),
            classes=("structured",),
        )
        for k in (2, 8)
    ]
    result = fit_from_run_dirs(_config(), live, ["d"])
    assert [i.acceptance_source for i in result.inputs[1:]] == ["measured"] * 2
    (model,) = result.models
    assert model.prompt_class == "structured"
    assert model.acceptance.source == "counters"
    assert model.acceptance.per_position_rate == pytest.approx(rates)  # k=8, the largest fit k
    assert model.acceptance.acceptance_rate == pytest.approx(sum(rates) / 8)
    assert not any("counters" in note and "mixed" in note for note in result.notes)

    mixed = [
        write_run_dir(tmp_path / "mixed", f"k{k}", k, counters=live_1x(rates[:k])) for k in (2, 8)
    ]
    result = fit_from_run_dirs(_config(), mixed, ["d"])
    assert {m.acceptance.source for m in result.models} == {"client_chunks"}
    assert any(
        f"k8: the server's counters measured {sum(rates) / 8:.1%} acceptance over 2 prompt "
        "classes mixed" in note
        for note in result.notes
    )
