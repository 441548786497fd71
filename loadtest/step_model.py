"""The speedup model of speculative decoding: tokens per step, step cost, latency.

Pure arithmetic (numpy), no I/O; docs/tuning.md has the derivation. It sits below both its
users: ``tune`` fits it over several runs to choose k, and a single run (loadtest.expected)
uses it to say what its own host should give from the step costs it measured.

Acceptance. With greedy verification the draft's first j proposals are the same whatever k
is (the draft proposes token after token from the same prefix; k only says when it stops),
so position i is accepted with the same probability at every k >= i. vLLM's counter
``num_accepted_tokens_per_pos[i] / num_drafts`` is that probability, r_i = P(A >= i) for the
number A of accepted tokens in a step. Measured once at a large K it gives, for every k <= K,

    E[A | k] = sum_{i=1..k} r_i,        tokens per target step  tau(k) = 1 + E[A | k]

with no assumption that the r_i fall geometrically (Leviathan et al.'s (1 - a^(k+1))/(1 - a)
is the special case r_i = a^i).

Step cost. A speculative step runs k draft forwards and one target forward over k + 1
positions, so its time is affine in k: T(k) = c0 + c1 * k. Two measured k fix c0 and c1
(more k: least squares). c0 - t_base is the fixed price of speculating (the extra bookkeeping
and the verify step's overhead over a plain step); c1 is the draft's per-token cost plus the
verify step's growth per extra position. Step times alone cannot tell those two apart, and
the prediction does not need them apart.

Latency. Per output token: T(k) / tau(k) (baseline: t_base). A request of N output tokens:
E2E(k) = TTFT + (N - 1) * T(k) / tau(k), baseline E2E_base = TTFT_base + (N - 1) * t_base,
and the E2E speedup is E2E_base / E2E(k).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


class PredictionError(ValueError):
    """The measurements cannot support the asked prediction; the message says what is missing."""


def check_rates(rates: Sequence[float] | np.ndarray) -> np.ndarray:
    """Per-position acceptance rates r_1..r_K as an array, after checking they are rates."""
    array = np.asarray(rates, dtype=float)
    if array.ndim != 1 or array.size == 0:
        raise PredictionError("per-position acceptance rates must be a non-empty list")
    if np.any(array < 0) or np.any(array > 1):
        raise PredictionError(f"per-position acceptance rates must lie in [0, 1]: {rates}")
    return array


def expected_accepted(rates: Sequence[float], k: int) -> float:
    """E[accepted tokens per step | window k] = r_1 + ... + r_k (measured positions only)."""
    array = check_rates(rates)
    if k < 0:
        raise PredictionError(f"k must be >= 0, got {k}")
    if k > array.size:
        raise PredictionError(
            f"k={k} exceeds the {array.size} positions measured; measure at a larger k or use "
            "extend_rates() to extrapolate (flagged as such)"
        )
    return float(array[:k].sum())


def tokens_per_step(rates: Sequence[float], k: int) -> float:
    """Tokens one target step yields at window k: the accepted ones plus the target's own."""
    return 1.0 + expected_accepted(rates, k)


def extend_rates(rates: Sequence[float] | np.ndarray, k_max: int) -> np.ndarray:
    """Rates up to position k_max; beyond the measured ones, the last measured conditional
    rate r_K / r_(K-1) is held constant (an extrapolation; callers must say so)."""
    array = check_rates(rates)
    if k_max <= array.size:
        return array[:k_max].copy()
    previous = array[-2] if array.size >= 2 else 1.0
    ratio = float(array[-1] / previous) if previous > 0 else 0.0
    tail = array[-1] * ratio ** np.arange(1, k_max - array.size + 1)
    return np.concatenate([array, tail])


@dataclass(frozen=True)
class StepCost:
    """T(k) = intercept_s + per_k_s * k for a speculative step; baseline_s for a plain step."""

    baseline_s: float
    intercept_s: float
    per_k_s: float

    def step_s(self, k: int) -> float:
        return self.baseline_s if k == 0 else self.intercept_s + self.per_k_s * k

    @property
    def fixed_overhead_s(self) -> float:
        """What speculating costs per step before any draft token: c0 - t_base."""
        return self.intercept_s - self.baseline_s


@dataclass(frozen=True)
class Prediction:
    k: int
    tokens_per_step: float
    step_s: float
    per_token_s: float
    e2e_s: float
    e2e_speedup: float
    per_token_speedup: float
    extrapolated: bool  # k beyond the positions whose acceptance was measured


def predict(
    rates: Sequence[float],
    cost: StepCost,
    k: int,
    *,
    output_tokens: float,
    ttft_s: float,
    baseline_ttft_s: float,
    tokens_per_step: float | None = None,
) -> Prediction:
    """Tokens per step, per-token latency and E2E speedup at window k (k=0: no drafts).

    ``tokens_per_step``: tau(k) from elsewhere (replay_tokens_per_step); default
    1 + r_1 + ... + r_k."""
    if output_tokens < 1:
        raise PredictionError(f"output_tokens must be >= 1, got {output_tokens}")
    measured = check_rates(rates)
    extended = extend_rates(measured, max(k, 1))
    tau = 1.0 + float(extended[:k].sum()) if tokens_per_step is None else tokens_per_step
    step = cost.step_s(k)
    e2e = request_latency_s(
        step, tau, output_tokens=output_tokens, ttft_s=ttft_s if k else baseline_ttft_s
    )
    baseline_e2e = request_latency_s(
        cost.baseline_s, 1.0, output_tokens=output_tokens, ttft_s=baseline_ttft_s
    )
    return Prediction(
        k=k,
        tokens_per_step=tau,
        step_s=step,
        per_token_s=step / tau,
        e2e_s=e2e,
        e2e_speedup=baseline_e2e / e2e,
        per_token_speedup=cost.baseline_s / (step / tau),
        extrapolated=k > measured.size,
    )


def request_latency_s(
    step_s: float, tokens_per_step: float, *, output_tokens: float, ttft_s: float
) -> float:
    """E2E of a request of N output tokens: TTFT + (N - 1) x step / tau."""
    if output_tokens < 1:
        raise PredictionError(f"output_tokens must be >= 1, got {output_tokens}")
    return ttft_s + (output_tokens - 1) * step_s / tokens_per_step


def e2e_speedup(
    baseline_step_s: float,
    speculative_step_s: float,
    tokens_per_step: float,
    *,
    output_tokens: float,
    ttft_s: float,
    baseline_ttft_s: float,
) -> float:
    """Baseline E2E over speculative E2E for measured step costs and tokens per step."""
    baseline = request_latency_s(
        baseline_step_s, 1.0, output_tokens=output_tokens, ttft_s=baseline_ttft_s
    )
    return baseline / request_latency_s(
        speculative_step_s, tokens_per_step, output_tokens=output_tokens, ttft_s=ttft_s
    )


def relative_error(predicted: float, measured: float) -> float:
    """(predicted - measured) / measured."""
    if measured == 0:
        raise PredictionError("cannot compare with a measured value of 0")
    return (predicted - measured) / measured
