"""Predict speculative decoding's speedup for every window k from a few measured runs.

Pure arithmetic (numpy), no I/O. The model itself (tokens per step, step cost, latency) is
loadtest/step_model.py; this module fits it: per-position rates from streamed chunks, the
replay of a large window's trace at smaller k, the step-cost line through measured k, and
the break-even load.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from loadtest.step_model import PredictionError, StepCost

# Below this many decode steps a rate is not worth a number.
MIN_STEPS = 1


def rates_from_chunk_tokens(chunk_tokens: Sequence[Sequence[int]], k: int) -> np.ndarray:
    """Per-position rates from what a client saw, one request at a time (no counters).

    At concurrency 1 every streamed chunk after the first is one target step carrying
    A + 1 tokens, so r_i = share of steps with A >= i. The first chunk (the prefill's token)
    and the last (cut short by max_tokens) are not full steps and are left out.
    """
    accepted = [
        tokens - 1 for request in chunk_tokens for tokens in list(request)[1:-1] if tokens >= 1
    ]
    if len(accepted) < MIN_STEPS:
        raise PredictionError(
            "no full decode steps in the streamed chunks: raise max_tokens so requests span "
            "more than two chunks"
        )
    counts = np.asarray(accepted)
    if counts.max() > k:
        raise PredictionError(
            f"a chunk carried {counts.max() + 1} tokens, more than a step can at k={k}: chunks "
            "were merged (run at concurrency 1 and check the load generator's CPU)"
        )
    return np.array([(counts >= i).mean() for i in range(1, k + 1)])


REPLAY_REPLICATES = 64


@dataclass(frozen=True)
class TraceStep:
    """One target step of a request measured at window K: how many drafts it accepted."""

    accepted: int
    full: bool  # all K accepted: the position after them (the bonus token's) is unresolved
    last: bool  # the request's last chunk (cut by max_tokens)


def trace_steps(chunk_tokens: Sequence[int], measured_k: int) -> list[TraceStep]:
    """The steps of one request streamed at concurrency 1 (one chunk per target step; the
    first chunk is the prefill's token)."""
    steps = list(chunk_tokens)[1:]
    out = []
    for index, tokens in enumerate(steps):
        if tokens - 1 > measured_k:
            raise PredictionError(
                f"a chunk carried {tokens} tokens, more than a step can at k={measured_k}: "
                "chunks were merged (run at concurrency 1 and check the load generator's CPU)"
            )
        last = index == len(steps) - 1
        accepted = max(tokens - 1, 0)
        out.append(TraceStep(accepted, accepted == measured_k and not last, last))
    return out


def continuation_rate(traces: Sequence[Sequence[TraceStep]]) -> float:
    """P(the draft is right at the position after a full accept), estimated by the steps
    that directly follow a full accept (share accepting at least one); all steps if none."""
    after = [b.accepted >= 1 for t in traces for a, b in itertools.pairwise(t) if a.full]
    every = [s.accepted >= 1 for t in traces for s in t if not s.last]
    sample = after or every
    return float(np.mean(sample)) if sample else 0.0


def _draft_runs(trace: Sequence[TraceStep], q: float, rng: np.random.Generator) -> list[int]:
    """L(p) for every position p of the request: how many drafts in a row a step starting at
    p would get accepted. Greedy makes it exact from the trace: a step at p that accepted a < K
    gives L(p + j) = a - j and L(p + a) = 0; a full accept gives L(p + j) = K - j + L(p + K),
    and L(p + K) (the bonus position) is 1 + L(p + K + 1) if the draft is right there (drawn
    with probability q), else 0. Built from the end backwards."""
    runs: list[int] = []
    for step in reversed(trace):
        if step.full:
            bonus = 1 + runs[0] if runs and rng.random() < q else 0
            block = [step.accepted - j + bonus for j in range(step.accepted)] + [bonus]
        else:
            block = [step.accepted - j for j in range(step.accepted + 1)]
        runs = block + runs
    return runs


def _replayed_steps(runs: Sequence[int], k: int) -> int:
    position, steps = 0, 0
    while position < len(runs):
        position += min(runs[position], k) + 1
        steps += 1
    return steps


def replay_tokens_per_step(
    chunk_tokens: Sequence[Sequence[int]], measured_k: int, k: int, *, seed: int = 0
) -> float:
    """Tokens per target step at window k <= measured_k, replaying the requests streamed at
    measured_k (concurrency 1): each step of window k starts where the previous one ended.

    Per-position rates measured at a large window weigh each stretch of text by the steps
    that window spends there (few in easy stretches, many in hard ones); a smaller window
    spends more steps in the easy stretches, so the rates under-predict its tokens per
    step. The replay also counts the last step cut short by max_tokens. Seeded, averaged
    over REPLAY_REPLICATES draws of the unresolved bonus positions."""
    if not 1 <= k <= measured_k:
        raise PredictionError(f"k={k} outside the replayable windows 1..{measured_k}")
    traces = [trace_steps(t, measured_k) for t in chunk_tokens if len(t) > 1]
    traces = [t for t in traces if t]
    if not traces:
        raise PredictionError(
            "no decode steps in the streamed chunks: raise max_tokens so requests span more "
            "than one chunk"
        )
    q = continuation_rate(traces)
    rng = np.random.default_rng(seed)
    tokens = steps = 0.0
    for trace in traces:
        replicates = REPLAY_REPLICATES if any(s.full for s in trace) else 1
        for _ in range(replicates):
            runs = _draft_runs(trace, q, rng)
            tokens += len(runs) / replicates
            steps += _replayed_steps(runs, k) / replicates
    return tokens / steps


def fit_step_cost(baseline_step_s: float, speculative_step_s: Mapping[int, float]) -> StepCost:
    """Least-squares line through the measured SD step times (at least two distinct k)."""
    if baseline_step_s <= 0:
        raise PredictionError(f"baseline step time must be > 0, got {baseline_step_s}")
    ks = sorted(speculative_step_s)
    if len(ks) < 2:
        raise PredictionError(
            f"the step-cost model needs SD step times at two values of k at least, got {ks}; "
            "add a value to tuning.fit_k"
        )
    x = np.asarray(ks, dtype=float)
    y = np.asarray([speculative_step_s[k] for k in ks], dtype=float)
    if np.any(y <= 0):
        raise PredictionError(f"SD step times must be > 0: {dict(zip(ks, y, strict=True))}")
    per_k, intercept = np.polyfit(x, y, 1)
    return StepCost(float(baseline_step_s), float(intercept), float(per_k))


def break_even(levels: Sequence[int], speedups: Sequence[float]) -> float | None:
    """The concurrency above which SD stops paying: where the measured speedup curve first
    crosses 1 going up in load (linear between levels). 0.0: it pays at no measured level;
    None: it pays at every measured level."""
    pairs = sorted(zip(levels, speedups, strict=True))
    if not pairs:
        raise PredictionError("no concurrency levels measured")
    if pairs[0][1] < 1:
        return 0.0
    for (c0, s0), (c1, s1) in itertools.pairwise(pairs):
        if s1 < 1 <= s0:
            return float(c0 + (s0 - 1) / (s0 - s1) * (c1 - c0))
    return None
