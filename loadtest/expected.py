"""What this host should give: each class's E2E speedup predicted before the load, and the
run's own step costs that explain what it measured.

The miniature's speedups move between hosts (docs/local-run.md): acceptance is fixed by the
models, but the price of a speculative step against a plain one is the host's (its memory
bandwidth against its per-step overhead). Both figures below go through the speedup model
``tune`` fits (loadtest/step_model.py):

    E2E_base = TTFT_base + (N - 1) * t_base,  E2E_SD = TTFT_SD + (N - 1) * T_SD / tau

``t_base``: the baseline's time per decode step (one token each); ``T_SD``: the speculative
arm's time per target step (k drafts plus the verify), both read off streams after their
first token; ``tau``: tokens per target step from vLLM's counters.

1. The prediction (``calibrate``, ``predicted_speedup``): before the measured load starts,
   a few single-stream requests of each class go to each server (CALIBRATION_PROMPTS per
   class and arm, seconds in all), their streams give the step costs and TTFTs and the SD
   server's counters around each class give tau. Nothing the load measures goes into it, so
   it can be wrong: it misses when it falls outside the measured speedup's interval.
2. The explanation (``host_expectation``): the same model with the step costs read off the
   load's own streams, and tau from the per-class probe after the window (loadtest.probe).
   It restates the measurement through the model (it lies within a few percent of it by
   construction), so it is called what it is: the measured speedup *explained by a step
   ratio of* T_SD / t_base. Its interval comes from the same paired resamples as the
   measured speedup's, with tau held fixed; a measured speedup outside it says the model does
   not account for the run: the counters' acceptance disagrees with the streams, or time went
   somewhere the steps do not explain (queueing, a stalled client, cores taken by another
   process).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from experiment.config import Arm, StatisticsConfig
from loadtest.client import RequestParams
from loadtest.probe import send_by_class
from loadtest.prompts import Prompt, load_prompts
from loadtest.records import RequestRecord
from loadtest.results import (
    ClassAcceptance,
    HostExpectation,
    Interval,
    RequestAcceptance,
    RunSummary,
    StepCosts,
)
from loadtest.stats import PairedSamples, interval, pair_records, request_values, resample_counts
from loadtest.step_model import e2e_speedup
from loadtest.summary import read_arm

# Requests per class and arm of the calibration before the load: one request's decode steps
# (127 at the default 128 tokens) already average a step's cost, a second narrows the spread
# between prompts; the run records how long the calibration took (timings "calibration").
CALIBRATION_PROMPTS = 2
# The token count of the one request per arm sent first and not counted: a server's first
# request pays one-off costs (allocations, first-touch pages) a step does not.
WARMUP_TOKENS = 8

# Per pair, summed under each resample: the means the model reads.
_COLUMNS = (
    ("ttft_ms", 0),
    ("ttft_ms", 1),
    ("output_tokens", 0),
    ("seconds_after_first", 0),
    ("chunks_after_first", 0),
    ("seconds_after_first", 1),
    ("chunks_after_first", 1),
)


def _predicted_speedup(sums: np.ndarray, pairs: np.ndarray | float, tau: float) -> np.ndarray:
    """The model's E2E speedup for each row of summed columns (one row per resample)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ttft_b, ttft_s, tokens = (sums[:, i] / pairs for i in range(3))
        t_base = sums[:, 3] / sums[:, 4]
        t_sd = sums[:, 5] / sums[:, 6]
    out = np.full(sums.shape[0], np.nan)
    for row in np.flatnonzero(np.isfinite(t_base) & np.isfinite(t_sd) & (tokens >= 1)):
        out[row] = e2e_speedup(
            t_base[row],
            t_sd[row],
            tau,
            output_tokens=tokens[row],
            ttft_s=ttft_s[row] / 1000,
            baseline_ttft_s=ttft_b[row] / 1000,
        )
    return out


def predicted_speedup(costs: StepCosts) -> float:
    """The model's E2E speedup for one class's step costs."""
    return e2e_speedup(
        costs.baseline_step_ms / 1000,
        costs.speculative_step_ms / 1000,
        costs.tokens_per_step,
        output_tokens=costs.output_tokens,
        ttft_s=costs.speculative_ttft_ms / 1000,
        baseline_ttft_s=costs.baseline_ttft_ms / 1000,
    )


def _step_ms(records: Sequence[RequestRecord]) -> tuple[float, float, float] | None:
    """(ms per step after the first token, mean TTFT ms, mean output tokens) of ``records``'
    successful requests (None: none streamed two token-carrying chunks)."""
    done = [request_values(r) for r in records if r.ok]
    chunks = sum(v["chunks_after_first"] for v in done)
    if not done or chunks == 0:
        return None
    seconds = sum(v["seconds_after_first"] for v in done)
    ttft = [v["ttft_ms"] for v in done if np.isfinite(v["ttft_ms"])]
    tokens = [v["output_tokens"] for v in done if np.isfinite(v["output_tokens"])]
    if not ttft or not tokens:
        return None
    return 1000 * seconds / chunks, float(np.mean(ttft)), float(np.mean(tokens))


def calibration_costs(
    baseline: Sequence[RequestRecord], speculative: Sequence[RequestRecord], tau: float | None
) -> StepCosts | None:
    """One class's step costs from its calibration requests on each arm and the SD
    server's tokens per step around them (None: a side streamed nothing to time, or no tau).
    """
    base, sd = _step_ms(baseline), _step_ms(speculative)
    if base is None or sd is None or tau is None:
        return None
    return StepCosts(
        baseline_step_ms=base[0],
        speculative_step_ms=sd[0],
        tokens_per_step=tau,
        baseline_ttft_ms=base[1],
        speculative_ttft_ms=sd[1],
        output_tokens=(base[2] + sd[2]) / 2,
    )


def calibrate(
    urls: Mapping[Arm, str],
    prompts: Sequence[Prompt],
    params: RequestParams,
    per_class: int = CALIBRATION_PROMPTS,
) -> dict[str, StepCosts]:
    """Before the measured load: ``per_class`` prompts of each class to each arm, one request
    at a time after one uncounted warm-up request per arm, and each class's step costs from
    their streams (tau from the SD server's counters around the class). A class without
    costs (a failed request, no counters) is left out: it gets no prediction."""
    work: dict[str, list[tuple[Prompt, int]]] = {}
    for prompt in prompts:
        members = work.setdefault(prompt.prompt_class, [])
        if len(members) < per_class:
            members.append((prompt, len(members)))
    warmup = replace(params, max_tokens=WARMUP_TOKENS)
    records: dict[Arm, dict[str, list[RequestRecord]]] = {}
    tau: dict[str, float | None] = {}
    for arm in (Arm.BASELINE, Arm.SPECULATIVE):
        first = {"warmup": [(prompts[0], 0)]} if prompts else {}
        for _ in send_by_class(
            urls[arm], first, warmup, concurrency=1, arm=arm.value, counters=False
        ):
            pass  # not counted: the server's first request
        records[arm] = {}
        for done in send_by_class(
            urls[arm], work, params,
            concurrency=1, arm=arm.value, counters=arm is Arm.SPECULATIVE,
        ):  # fmt: skip
            records[arm][done.prompt_class] = done.records
            if done.acceptance is not None:
                tau[done.prompt_class] = done.acceptance.mean_acceptance_length
    out = {}
    for name in sorted(work):
        costs = calibration_costs(
            records[Arm.BASELINE].get(name, []),
            records[Arm.SPECULATIVE].get(name, []),
            tau.get(name),
        )
        if costs is not None:
            out[name] = costs
    return out


def calibrate_suite(
    prompt_files: Sequence[str], urls: Mapping[Arm, str], params: RequestParams
) -> dict[str, StepCosts]:
    """calibrate with the first CALIBRATION_PROMPTS prompts of each class of a suite."""
    return calibrate(urls, load_prompts(list(prompt_files)), params)


def _class_expectation(
    name: str,
    samples: PairedSamples,
    acceptance: ClassAcceptance | RequestAcceptance,
    measured: Interval,
    settings: StatisticsConfig,
    calibrated: StepCosts | None = None,
) -> HostExpectation:
    tau = acceptance.mean_acceptance_length
    if tau is None:
        raise ValueError(f"{name}: no tokens per step from the counters")
    columns = np.stack([samples.values[key][arm] for key, arm in _COLUMNS], axis=1)
    columns = np.nan_to_num(columns)
    pairs = len(samples)
    totals = columns.sum(axis=0, keepdims=True)
    costs = StepCosts(
        baseline_step_ms=1000 * float(totals[0, 3] / totals[0, 4]),
        speculative_step_ms=1000 * float(totals[0, 5] / totals[0, 6]),
        tokens_per_step=tau,
        baseline_ttft_ms=float(totals[0, 0] / pairs),
        speculative_ttft_ms=float(totals[0, 1] / pairs),
        output_tokens=float(totals[0, 2] / pairs),
    )
    point = _predicted_speedup(totals, float(pairs), tau)[0]
    resamples = resample_counts(pairs, settings)
    replicates = _predicted_speedup(resamples.sums(columns), float(pairs), tau)
    predicted = interval(float(point), replicates, pairs, settings)
    return HostExpectation(
        prompt_class=name,
        costs=costs,
        predicted_e2e_speedup=predicted,
        measured_e2e_speedup=measured,
        calibration=calibrated,
        predicted_before_load=None if calibrated is None else predicted_speedup(calibrated),
    )


def host_expectation(
    baseline: Iterable[RequestRecord],
    speculative: Iterable[RequestRecord],
    acceptance_by_class: Mapping[str, ClassAcceptance | RequestAcceptance],
    measured_by_class: Mapping[str, Interval],
    *,
    settings: StatisticsConfig,
    calibration: Mapping[str, StepCosts] | None = None,
) -> list[HostExpectation]:
    """Per class with a measured E2E speedup and probed acceptance: what the run's step
    costs explain, next to what was measured, and what ``calibration`` (step costs measured
    before the load: ``calibrate``) predicted. A class without a measured speedup or probed
    acceptance is left out (nothing to compare with, or to explain it by)."""
    samples = pair_records(baseline, speculative)
    out = []
    for name, measured in sorted(measured_by_class.items()):
        acceptance = acceptance_by_class.get(name)
        subset = samples.subset(samples.prompt_class == name)
        if acceptance is None or acceptance.mean_acceptance_length is None or len(subset) < 2:
            continue
        calibrated = (calibration or {}).get(name)
        out.append(_class_expectation(name, subset, acceptance, measured, settings, calibrated))
    return out


def run_expectation(
    run_dir: Path,
    summary: RunSummary,
    acceptance_by_class: Mapping[str, ClassAcceptance | RequestAcceptance],
    calibration: Mapping[str, StepCosts] | None = None,
) -> list[HostExpectation]:
    """host_expectation of a summarized run, from its records; empty without statistics."""
    analysis, statistics = summary.run.analysis, summary.statistics
    if analysis is None or statistics is None:
        return []
    baseline, _ = read_arm(run_dir, Arm.BASELINE.value)
    speculative, _ = read_arm(run_dir, Arm.SPECULATIVE.value)
    return host_expectation(
        baseline,
        speculative,
        acceptance_by_class,
        {name: scope.speedup["e2e_ms"]["mean"] for name, scope in statistics.by_class.items()},
        settings=analysis.statistics,
        calibration=calibration,
    )
