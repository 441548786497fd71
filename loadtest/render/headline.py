"""The headline of a run: the few numbers a reader wants first (acceptance, speedups,
lossless rate), as a typed block (local_run.json) and as text (console, local_run.md)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from experiment.config import Arm
from loadtest.render.decision import margin_text
from loadtest.results import (
    ClassVerdict,
    HostExpectation,
    Interval,
    LatencySource,
    RunSummary,
)

# Where the headline's per-class acceptance comes from.
CLASS_PROBE = "one class at a time"  # loadtest.probe, after the measured window
CLASS_PER_REQUEST = "per request, under the measured load"  # loadtest.acceptance


class ClassSpeedup(BaseModel):
    model_config = ConfigDict(extra="forbid")

    e2e_mean: float | None = None
    ttft_mean: float | None = None
    tpot_mean: float | None = None


class Headline(BaseModel):
    """The numbers the local run states, pulled from the run summary."""

    model_config = ConfigDict(extra="forbid")

    acceptance_rate: float | None = None
    mean_acceptance_length: float | None = None
    acceptance_note: str | None = None  # why acceptance is not available
    acceptance_source: str | None = None  # per request, measured, estimated or not available
    speedup_e2e_mean: float | None = None
    speedup_tpot_mean: float | None = None
    speedup_ttft_mean: float | None = None
    speedup_output_throughput: float | None = None
    speedup_by_class: dict[str, ClassSpeedup] = Field(default_factory=dict)
    # Why the TTFT and TPOT speedups are left out (an arm's chunks arrived in bursts and the
    # servers' histograms are not available), or why they come from the servers' histograms.
    speedup_note: str | None = None
    # Where the TTFT and TPOT speedups come from: "client stream" or "server histograms"
    # (RunSummary.per_token_source).
    speedup_source: str = LatencySource.CLIENT_STREAM.value
    lossless_exact_match_rate: float | None = None
    lossless_prompts_compared: int = 0
    lossless_prefix_agreement: float | None = None
    # Acceptance per prompt class: each measured request's own figures summed per class
    # (loadtest.acceptance, "per request"), or probed one class at a time after the measured
    # window (loadtest.probe) where the server returns no figures; empty when neither.
    acceptance_by_class: dict[str, float | None] = Field(default_factory=dict)
    acceptance_by_class_source: str = CLASS_PROBE
    # Use SD or not, per prompt class then all, with why (loadtest.verdict); empty when the
    # run has no statistics.
    verdict: list[ClassVerdict] = Field(default_factory=list)
    # What a "no gain" verdict means in USD per 1M output tokens (render.decision.margin_text).
    margin_note: str | None = None
    # Per class: what this host's step costs predict for the E2E speedup, next to what was
    # measured (loadtest.expected); empty when not computed (no probed acceptance).
    host_expectation: list[HostExpectation] = Field(default_factory=list)


def bursty_arms_note(summary: RunSummary) -> str | None:
    """Why the TTFT and TPOT speedups are not the client stream's (an arm's chunks arrived in
    bursts: the summary's per_token_source_reason), or None on a smooth run.

    A bursting arm's stream timing is the client's or the server's grouping of tokens, not
    generation: its TTFT and per-token latencies are artefacts. Its servers' histograms
    (engine step timestamps) stand in when both arms have them; otherwise no speedup is
    stated from them."""
    reason = summary.per_token_source_reason
    if reason is None:
        return None
    if summary.per_token_source is LatencySource.SERVER_HISTOGRAMS:
        return f"TTFT and TPOT speedups from the server histograms: {reason}"
    return f"TTFT and TPOT speedups left out: {reason} (see the run's warnings)"


def _server_mean(stats: dict[str, dict[str, Interval]] | None, metric: str) -> float | None:
    interval = (stats or {}).get(metric, {}).get("mean")
    return None if interval is None else interval.estimate


def headline(
    summary: RunSummary,
    acceptance_by_class: dict[str, float | None] | None = None,
    host_expectation: list[HostExpectation] | None = None,
    *,
    acceptance_by_class_source: str = CLASS_PROBE,
) -> Headline:
    acceptance = summary.arm(Arm.SPECULATIVE).acceptance
    overall = summary.speedup.overall
    note = bursty_arms_note(summary)
    source = summary.per_token_source
    client = note is None
    server = summary.server_speedup if source is LatencySource.SERVER_HISTOGRAMS else None
    by_class = {}
    for name, block in summary.speedup.by_class.items():
        from_server = server.by_class.get(name) if server else None
        by_class[name] = ClassSpeedup(
            e2e_mean=block.e2e_ms.mean,
            ttft_mean=block.ttft_ms.mean if client else _server_mean(from_server, "ttft_ms"),
            tpot_mean=block.tpot_ms.mean if client else _server_mean(from_server, "tpot_ms"),
        )
    return Headline(
        acceptance_rate=acceptance.acceptance_rate,
        mean_acceptance_length=acceptance.mean_acceptance_length,
        acceptance_note=acceptance.reason,
        acceptance_source=acceptance.source.value,
        speedup_e2e_mean=overall.e2e_ms.mean if overall else None,
        speedup_tpot_mean=(
            (overall.tpot_ms.mean if overall else None)
            if client
            else _server_mean(server.overall if server else None, "tpot_ms")
        ),
        speedup_ttft_mean=(
            (overall.ttft_ms.mean if overall else None)
            if client
            else _server_mean(server.overall if server else None, "ttft_ms")
        ),
        speedup_output_throughput=overall.output_throughput_tok_s if overall else None,
        speedup_by_class=by_class,
        speedup_note=note,
        speedup_source=source.value,
        lossless_exact_match_rate=summary.lossless.exact_match_rate,
        lossless_prompts_compared=summary.lossless.prompts_compared,
        lossless_prefix_agreement=summary.lossless.prefix_agreement_rate,
        acceptance_by_class=dict(acceptance_by_class or {}),
        acceptance_by_class_source=acceptance_by_class_source,
        verdict=summary.verdict,
        margin_note=margin_text(summary),
        host_expectation=list(host_expectation or []),
    )


def expectation_text(expectation: HostExpectation) -> str:
    """One class's speedup predicted before the load (whether it held), then the step ratio
    of the run's own step costs that explains the measured one (loadtest.expected)."""
    costs, explained = expectation.costs, expectation.predicted_e2e_speedup
    measured = expectation.measured_e2e_speedup
    agreement = {
        True: "within its interval",
        False: "OUTSIDE its interval: time went where the steps do not account for it",
        None: "no interval to compare with",
    }[expectation.agrees]
    calibrated, before = expectation.calibration, expectation.predicted_before_load
    if calibrated is None or before is None:
        prediction = "no prediction before the load"
    else:
        held = {
            True: "inside the measured interval",
            False: "MISSED: outside the measured interval",
            None: "no measured interval to compare with",
        }[expectation.prediction_holds]
        prediction = (
            f"predicted before the load {before:.2f}x (calibration: step ratio "
            f"{calibrated.step_ratio:.2f}, {calibrated.tokens_per_step:.2f} tokens per step), "
            f"{held}"
        )
    return (
        f"{expectation.prompt_class}: measured {_fmt(measured.estimate, '{:.2f}x')} "
        f"[{_fmt(measured.low, '{:.2f}')}, {_fmt(measured.high, '{:.2f}')}]; {prediction}; "
        f"explained by a step ratio of {costs.step_ratio:.2f} (the run's own baseline step "
        f"{costs.baseline_step_ms:.1f} ms, speculative step {costs.speculative_step_ms:.1f} ms, "
        f"{costs.tokens_per_step:.2f} tokens per step give "
        f"{_fmt(explained.estimate, '{:.2f}x')} [{_fmt(explained.low, '{:.2f}')}, "
        f"{_fmt(explained.high, '{:.2f}')}], {agreement})"
    )


def _fmt(value: float | None, pattern: str) -> str:
    return "n/a" if value is None else pattern.format(value)


def headline_text(numbers: Headline) -> str:
    lines = [
        f"acceptance rate: {_fmt(numbers.acceptance_rate, '{:.1%}')} "
        f"({numbers.acceptance_source or 'not available'}; mean acceptance length "
        f"{_fmt(numbers.mean_acceptance_length, '{:.2f}')} "
        "tokens per target step)",
    ]
    for name, rate in sorted(numbers.acceptance_by_class.items()):
        lines.append(
            f"  {name} prompts, {numbers.acceptance_by_class_source}: {_fmt(rate, '{:.1%}')}"
        )
    lines += [
        f"speedup SD vs baseline (>1 = SD faster): E2E mean "
        f"{_fmt(numbers.speedup_e2e_mean, '{:.2f}x')}, TTFT mean "
        f"{_fmt(numbers.speedup_ttft_mean, '{:.2f}x')}, TPOT mean "
        f"{_fmt(numbers.speedup_tpot_mean, '{:.2f}x')} (TTFT and TPOT from the "
        f"{numbers.speedup_source}), output throughput "
        f"{_fmt(numbers.speedup_output_throughput, '{:.2f}x')}",
    ]
    for name, block in sorted(numbers.speedup_by_class.items()):
        lines.append(
            f"  {name} prompts: E2E mean {_fmt(block.e2e_mean, '{:.2f}x')}, "
            f"TTFT mean {_fmt(block.ttft_mean, '{:.2f}x')}, "
            f"TPOT mean {_fmt(block.tpot_mean, '{:.2f}x')}"
        )
    if numbers.speedup_note:
        lines.append(f"  {numbers.speedup_note}")
    if numbers.host_expectation:
        lines.append(
            "E2E speedup predicted before the load and explained by the run's step costs "
            "(loadtest/expected.py):"
        )
        lines += [f"  {expectation_text(e)}" for e in numbers.host_expectation]
    lines.append(
        f"lossless exact-match rate (greedy SD output == baseline output): "
        f"{_fmt(numbers.lossless_exact_match_rate, '{:.0%}')} of "
        f"{numbers.lossless_prompts_compared} prompts, prefix agreement "
        f"{_fmt(numbers.lossless_prefix_agreement, '{:.1%}')}"
    )
    if numbers.verdict:
        # Last, so the run ends on its decision and on what would let it decide.
        lines.append("verdict, use SD? (cost per 1M output tokens, SD / baseline):")
        if numbers.margin_note:
            lines.append(f"  {numbers.margin_note}")
        lines += [f"  {v.prompt_class}: {v.decision.value}: {v.reason}" for v in numbers.verdict]
    return "\n".join(lines)
