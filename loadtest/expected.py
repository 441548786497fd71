"""What this host should give: each class's E2E speedup predicted from the arms' step costs.

The miniature's speedups move between hosts (docs/local-run.md): acceptance is fixed by the
models, but the price of a speculative step against a plain one is the host's (its memory
bandwidth against its per-step overhead). A run therefore keeps each class's step costs
and states what they predict, through the speedup model ``tune`` fits
(loadtest/step_model.py):

    E2E_base = TTFT_base + (N - 1) * t_base,  E2E_SD = TTFT_SD + (N - 1) * T_SD / tau

``t_base``: the baseline's time per decode step (one token each); ``T_SD``: the speculative
arm's time per target step (k drafts plus the verify), both read off the measured streams
after their first token; ``tau``: tokens per target step from vLLM's counters, probed one
class at a time outside the window (loadtest.probe). The prediction's interval comes from
the same paired resamples as the measured speedup's (loadtest.stats), with tau held fixed.
A measured speedup outside it says the model does not account for the run: the counters'
acceptance disagrees with the streams, or time went somewhere the steps do not explain
(queueing, a stalled client, cores taken by another process).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from experiment.config import Arm, StatisticsConfig
from loadtest.records import RequestRecord
from loadtest.results import ClassAcceptance, HostExpectation, Interval, RunSummary, StepCosts
from loadtest.stats import PairedSamples, interval, pair_records, resample_counts
from loadtest.step_model import e2e_speedup
from loadtest.summary import read_arm

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


def _class_expectation(
    name: str,
    samples: PairedSamples,
    acceptance: ClassAcceptance,
    measured: Interval,
    settings: StatisticsConfig,
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
    )


def host_expectation(
    baseline: Iterable[RequestRecord],
    speculative: Iterable[RequestRecord],
    acceptance_by_class: Mapping[str, ClassAcceptance],
    measured_by_class: Mapping[str, Interval],
    *,
    settings: StatisticsConfig,
) -> list[HostExpectation]:
    """Per class with a measured E2E speedup and probed acceptance: what the step costs
    predict, next to what was measured. A class without either is left out (nothing to
    predict from, or nothing to compare with)."""
    samples = pair_records(baseline, speculative)
    out = []
    for name, measured in sorted(measured_by_class.items()):
        acceptance = acceptance_by_class.get(name)
        subset = samples.subset(samples.prompt_class == name)
        if acceptance is None or acceptance.mean_acceptance_length is None or len(subset) < 2:
            continue
        out.append(_class_expectation(name, subset, acceptance, measured, settings))
    return out


def run_expectation(
    run_dir: Path, summary: RunSummary, acceptance_by_class: Mapping[str, ClassAcceptance]
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
    )
