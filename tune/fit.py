"""``python -m tune fit``: the tuning model from load-test run directories (the trn2 loop).

On trn2 every candidate (draft, k) is its own deployed arm, measured with the load test
(``python -m loadtest run --baseline ... --speculative <candidate>``, concurrency 1). This
module turns those run directories (run.json + records_<arm>.jsonl, the load test's own typed
files) into the same ``Run`` objects the local sweep measures, then fits, predicts the k that
were not measured, checks the held-out ones and recommends, exactly as ``tune.local`` does.

- Every directory is one comparison (baseline arm vs one candidate arm). The baseline at
  concurrency 1 is the baseline arm of the first directory; every directory's speculative
  arm is a candidate, paired with that baseline by schedule index (same config and seed ->
  same prompt at the same index).
- k comes from run.json (``analysis.num_speculative_tokens``, what the load test recorded for
  the arm); the draft name from ``--draft`` (one per candidate, or one for all).
- A candidate at concurrency 1 whose k is in ``tuning.holdout_k`` is held out; the others
  fit. A candidate measured at a higher concurrency is a break-even point, with its own
  directory's baseline arm as the baseline at that level.
- Acceptance per position comes from the server's counters where they are real (vllm-neuron
  1.x, vLLM V1: the SD arm's window counters moved) and the window held one prompt class, so
  they belong to it (``acceptance.source = counters``). Otherwise it comes from the client's
  tokens per chunk (concurrency 1), per class (``client_chunks``), and tune.json's notes say
  why: no counters at all (the published fork), counters that cover several classes mixed,
  or counters that are "not available" (frozen while the arm generated tokens, as on
  vllm-neuron 0.2.x). A frozen counter is never read as 0% acceptance. Each input records its
  server's acceptance source (``inputs[].acceptance_source``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from experiment.config import Arm, ExperimentConfig
from loadtest.metrics import window_s
from loadtest.records import RequestRecord, read_records
from loadtest.results import Acceptance as ServerAcceptance
from loadtest.results import AcceptanceSource, RunInfo
from loadtest.step_model import PredictionError
from loadtest.summary import read_run_info, read_window_meta, window_acceptance
from runtime.validate import SCHEDULE_REFUSED
from tune.analysis import (
    TOLERANCE,
    break_even_by_class,
    cost_at_load,
    fit_and_recommend,
)
from tune.measure import sample_of
from tune.results import Acceptance, ClassRun, FitInput, Role, Run, Setting, TuneResult
from tune.schedule import add_schedule


@dataclass(frozen=True)
class Measured:
    """One load-test run directory: what was run and each arm's measured records."""

    run_dir: Path
    info: RunInfo
    records: dict[Arm, list[RequestRecord]]
    acceptance: ServerAcceptance
    """The SD arm's acceptance from its window's /metrics scrapes (loadtest.summary)."""

    @property
    def concurrency(self) -> int:
        return self.info.load_shape.concurrency

    @property
    def k(self) -> int:
        if self.info.analysis is None:
            raise PredictionError(
                f"{self.run_dir}/run.json records no k (analysis.num_speculative_tokens): the "
                "run was made by an older load test; measure it again"
            )
        return self.info.analysis.num_speculative_tokens


def read_measured(run_dir: Path) -> Measured:
    """A run directory's run.json and records (warm-up excluded); a clear error otherwise."""
    try:
        info = read_run_info(run_dir)
    except ValueError as err:
        raise PredictionError(str(err)) from None
    records = {}
    for arm in Arm:
        path = run_dir / f"records_{arm.value}.jsonl"
        if not path.is_file():
            raise PredictionError(f"{run_dir}: no {path.name}; was the arm run?")
        try:
            records[arm] = [r for r in read_records(path) if not r.warmup]
        except ValueError as err:
            raise PredictionError(str(err)) from None
    speculative = Arm.SPECULATIVE
    acceptance = window_acceptance(
        read_window_meta(run_dir, speculative), speculative, records[speculative]
    )
    return Measured(run_dir=run_dir, info=info, records=records, acceptance=acceptance)


def with_server_acceptance(run: Run, measured: Measured) -> Run:
    """The candidate's class runs with the server's acceptance where it belongs to one class,
    and otherwise a note saying why the client's tokens per chunk stand in."""
    block = measured.acceptance
    name = measured.run_dir.name
    if block.source is AcceptanceSource.MEASURED:
        if len(run.classes) == 1 and block.per_position_rate:
            (class_run,) = run.classes.values()
            class_run.acceptance = Acceptance(
                source="counters",
                per_position_rate=block.per_position_rate,
                acceptance_rate=block.acceptance_rate,
                steps=block.drafts,
            )
            return run
        rate = "n/a" if block.acceptance_rate is None else f"{block.acceptance_rate:.1%}"
        note = (
            f"{name}: the server's counters measured {rate} acceptance over "
            f"{len(run.classes)} prompt classes mixed"
            + ("" if block.per_position_rate else " without per-position counters")
            + " (run one class per directory to fit on counters)"
        )
    elif block.source is AcceptanceSource.ESTIMATED:
        note = f"{name}: {block.reason}"
    else:
        note = f"{name}: server acceptance not available ({block.reason})"
    for class_run in run.classes.values():
        class_run.acceptance_note = note
    return run


def run_of(records: Sequence[RequestRecord], setting: Setting, role: Role, level: int) -> Run:
    """The records of one arm as a tune ``Run`` (a request's schedule index is its repeat, so
    the two arms of the same schedule pair up by (prompt, index))."""
    classes: dict[str, list[RequestRecord]] = {}
    for record in records:
        classes.setdefault(record.prompt_class, []).append(record)
    return Run(
        setting=setting,
        role=role,
        concurrency=level,
        classes={
            name: ClassRun(prompt_class=name, samples=[sample_of(r, r.index) for r in members])
            for name, members in sorted(classes.items())
        },
        wall_s=window_s(list(records)),
    )


def drafts_for(candidates: int, drafts: Sequence[str], default: str) -> list[str]:
    if not drafts:
        return [default] * candidates
    if len(drafts) == 1:
        return list(drafts) * candidates
    if len(drafts) != candidates:
        raise PredictionError(
            f"{len(drafts)} --draft for {candidates} candidate directories: give one --draft "
            "per candidate (in order), or one for all"
        )
    return list(drafts)


def fit_from_run_dirs(
    config: ExperimentConfig, run_dirs: Sequence[Path], drafts: Sequence[str]
) -> TuneResult:
    """Fit, predict, check and recommend from load-test run directories (the first one's
    baseline arm is the baseline; every one's speculative arm is a candidate)."""
    if not run_dirs:
        raise PredictionError("no load-test run directory given")
    baseline_dir = run_dirs[0]
    baseline = read_measured(baseline_dir)
    if baseline.concurrency != 1:
        raise PredictionError(
            f"{baseline_dir} ran at concurrency {baseline.concurrency}: the baseline of the fit "
            "must be measured one request at a time (-c loadtest.concurrency=1)"
        )
    candidates = [baseline, *(read_measured(d) for d in run_dirs[1:])]
    names = drafts_for(len(candidates), drafts, config.serving.draft_model)
    holdout = set(config.tuning.holdout_k)
    runs = [run_of(baseline.records[Arm.BASELINE], Setting(), "baseline", 1)]
    inputs = [
        FitInput(run_dir=baseline_dir.name, setting=Setting(), role="baseline", concurrency=1)
    ]
    levels_with_baseline = {1}
    for measured, draft in zip(candidates, names, strict=True):
        setting = Setting(draft=draft, k=measured.k)
        level = measured.concurrency
        role: Role = "break_even" if level > 1 else "holdout" if setting.k in holdout else "fit"
        if level not in levels_with_baseline:
            runs.append(run_of(measured.records[Arm.BASELINE], Setting(), "baseline", level))
            levels_with_baseline.add(level)
            inputs.append(
                FitInput(
                    run_dir=measured.run_dir.name,
                    setting=Setting(),
                    role="baseline",
                    concurrency=level,
                )
            )
        candidate = run_of(measured.records[Arm.SPECULATIVE], setting, role, level)
        runs.append(with_server_acceptance(candidate, measured))
        inputs.append(
            FitInput(
                run_dir=measured.run_dir.name,
                setting=setting,
                role=role,
                concurrency=level,
                acceptance_source=measured.acceptance.source.value,
            )
        )
    boot = config.statistics
    analysis = baseline.info.analysis
    target: Literal["local", "trn2"] = (
        "local" if analysis is not None and analysis.price.target == "local" else "trn2"
    )
    result = TuneResult(target=target, tolerance=TOLERANCE, plan=None, inputs=inputs, runs=runs)
    fit_k = {
        draft: sorted({r.setting.k for r in runs if r.setting.draft == draft and r.role == "fit"})
        for draft in sorted(set(names))
    }
    fit_and_recommend(result, fit_k, config.tuning.predict_k_max, boot)
    loaded: list[Setting] = []
    for run in runs:
        if run.role == "break_even" and run.setting not in loaded:
            loaded.append(run.setting)
    for setting in loaded:
        result.break_even += break_even_by_class(runs, setting, config.serving.max_num_seqs, boot)
    if loaded and analysis is not None:
        result.cost = cost_at_load(runs, loaded[0], analysis.price)
    # A schedule where two fit k were measured at several concurrencies; deployable only on an
    # engine that serves one (runtime/validate.py, SCHEDULE_REFUSED).
    refused = None if target == "local" else SCHEDULE_REFUSED.get(config.serving.generation)
    seqs = config.local.max_num_seqs if target == "local" else config.serving.max_num_seqs
    add_schedule(result, seqs, boot, refused)
    return result
