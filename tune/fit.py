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
- The Neuron fork exports no spec-decode counters, and a load-test window spans every prompt
  class, so acceptance per position always comes from the client's tokens per chunk
  (concurrency 1), per class; tune.json says so (``acceptance.source = client_chunks``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from experiment.config import Arm, ExperimentConfig
from loadtest.metrics import window_s
from loadtest.records import RequestRecord, read_records
from loadtest.results import RunInfo
from loadtest.summary import read_run_info
from tune.analysis import (
    TOLERANCE,
    Bootstrap,
    break_even_by_class,
    cost_at_load,
    fit_and_recommend,
)
from tune.measure import sample_of
from tune.predict import PredictionError
from tune.results import ClassRun, FitInput, Role, Run, Setting, TuneResult


@dataclass(frozen=True)
class Measured:
    """One load-test run directory: what was run and each arm's measured records."""

    run_dir: Path
    info: RunInfo
    records: dict[Arm, list[RequestRecord]]

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
    return Measured(run_dir=run_dir, info=info, records=records)


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
        runs.append(run_of(measured.records[Arm.SPECULATIVE], setting, role, level))
        inputs.append(
            FitInput(run_dir=measured.run_dir.name, setting=setting, role=role, concurrency=level)
        )
    boot = Bootstrap(
        config.statistics.confidence, config.statistics.resamples, config.statistics.seed
    )
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
    return result
