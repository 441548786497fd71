"""The headline of a run: the few numbers a reader wants first (acceptance, speedups,
lossless rate), as a typed block (local_run.json) and as text (console, local_run.md)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from experiment.config import Arm
from loadtest.metrics import BURST_GAP_S, BURST_WARNING_FRACTION
from loadtest.render.decision import margin_text
from loadtest.results import ClassVerdict, HostExpectation, RunSummary


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
    acceptance_source: str | None = None  # measured, estimated or not available
    speedup_e2e_mean: float | None = None
    speedup_tpot_mean: float | None = None
    speedup_ttft_mean: float | None = None
    speedup_output_throughput: float | None = None
    speedup_by_class: dict[str, ClassSpeedup] = Field(default_factory=dict)
    # Why the TTFT and TPOT speedups are left out (an arm's chunks arrived in bursts).
    speedup_note: str | None = None
    lossless_exact_match_rate: float | None = None
    lossless_prompts_compared: int = 0
    lossless_prefix_agreement: float | None = None
    # Acceptance per prompt class, one request at a time after the measured window
    # (loadtest.probe); empty when not probed.
    acceptance_by_class: dict[str, float | None] = Field(default_factory=dict)
    # Use SD or not, per prompt class then all, with why (loadtest.verdict); empty when the
    # run has no statistics.
    verdict: list[ClassVerdict] = Field(default_factory=list)
    # What a "no gain" verdict means in USD per 1M output tokens (render.decision.margin_text).
    margin_note: str | None = None
    # Per class: what this host's step costs predict for the E2E speedup, next to what was
    # measured (loadtest.expected); empty when not computed (no probed acceptance).
    host_expectation: list[HostExpectation] = Field(default_factory=list)


def bursty_arms_note(summary: RunSummary) -> str | None:
    """Which arm's chunks arrived in bursts (the summary's burst warning), or None.

    A bursting arm's stream timing is the client's or the server's stall, not generation:
    its TTFT and per-token latencies are artefacts, so no speedup is stated from them."""
    bursty = [
        f"{arm.value} ({fraction:.0%} of chunk gaps under {BURST_GAP_S * 1000:.1f} ms)"
        for arm in Arm
        if (fraction := summary.arm(arm).overall.burst_gap_fraction) is not None
        and fraction > BURST_WARNING_FRACTION
    ]
    if not bursty:
        return None
    return (
        f"TTFT and TPOT speedups left out: chunks arrived in bursts on {', '.join(bursty)}, "
        "so they time the stream's arrival, not generation (see the run's warnings)"
    )


def headline(
    summary: RunSummary,
    acceptance_by_class: dict[str, float | None] | None = None,
    host_expectation: list[HostExpectation] | None = None,
) -> Headline:
    acceptance = summary.arm(Arm.SPECULATIVE).acceptance
    overall = summary.speedup.overall
    note = bursty_arms_note(summary)
    timing_trusted = note is None
    return Headline(
        acceptance_rate=acceptance.acceptance_rate,
        mean_acceptance_length=acceptance.mean_acceptance_length,
        acceptance_note=acceptance.reason,
        acceptance_source=acceptance.source.value,
        speedup_e2e_mean=overall.e2e_ms.mean if overall else None,
        speedup_tpot_mean=overall.tpot_ms.mean if overall and timing_trusted else None,
        speedup_ttft_mean=overall.ttft_ms.mean if overall and timing_trusted else None,
        speedup_output_throughput=overall.output_throughput_tok_s if overall else None,
        speedup_by_class={
            name: ClassSpeedup(
                e2e_mean=block.e2e_ms.mean,
                ttft_mean=block.ttft_ms.mean if timing_trusted else None,
                tpot_mean=block.tpot_ms.mean if timing_trusted else None,
            )
            for name, block in summary.speedup.by_class.items()
        },
        speedup_note=note,
        lossless_exact_match_rate=summary.lossless.exact_match_rate,
        lossless_prompts_compared=summary.lossless.prompts_compared,
        lossless_prefix_agreement=summary.lossless.prefix_agreement_rate,
        acceptance_by_class=dict(acceptance_by_class or {}),
        verdict=summary.verdict,
        margin_note=margin_text(summary),
        host_expectation=list(host_expectation or []),
    )


def expectation_text(expectation: HostExpectation) -> str:
    """One class's prediction from its step costs, the measured figure and whether they agree."""
    costs, predicted = expectation.costs, expectation.predicted_e2e_speedup
    measured = expectation.measured_e2e_speedup
    agreement = {
        True: "agrees",
        False: "DISAGREES: the measured speedup lies outside the interval the step costs predict",
        None: "no interval to compare with",
    }[expectation.agrees]
    return (
        f"{expectation.prompt_class}: predicted {_fmt(predicted.estimate, '{:.2f}x')} "
        f"[{_fmt(predicted.low, '{:.2f}')}, {_fmt(predicted.high, '{:.2f}')}] from a baseline "
        f"step of {costs.baseline_step_ms:.1f} ms, a speculative step of "
        f"{costs.speculative_step_ms:.1f} ms ({costs.step_ratio:.2f} plain steps) and "
        f"{costs.tokens_per_step:.2f} tokens per step; measured "
        f"{_fmt(measured.estimate, '{:.2f}x')}: {agreement}"
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
        lines.append(f"  {name} prompts, one class at a time: {_fmt(rate, '{:.1%}')}")
    lines += [
        f"speedup SD vs baseline (>1 = SD faster): E2E mean "
        f"{_fmt(numbers.speedup_e2e_mean, '{:.2f}x')}, TTFT mean "
        f"{_fmt(numbers.speedup_ttft_mean, '{:.2f}x')}, TPOT mean "
        f"{_fmt(numbers.speedup_tpot_mean, '{:.2f}x')}, output throughput "
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
            "what this host's step costs predict (E2E; loadtest/expected.py), against the measured:"
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
