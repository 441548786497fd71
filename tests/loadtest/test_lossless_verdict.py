"""The verdict's lossless rule follows the stated tolerance: exact locally, late drift
tolerated on Neuron (issue 23 item 5)."""

from __future__ import annotations

from experiment import build_config
from loadtest.analysis import LOCAL_LOSSLESS_AGREEMENT, analysis_info, lossless_failures_by_class
from loadtest.results import Lossless, LosslessMismatch


def _mismatch(prompt_class: str, first_diff_token: int, compared: int) -> LosslessMismatch:
    return LosslessMismatch(
        prompt_id=f"{prompt_class}-{first_diff_token}",
        prompt_class=prompt_class,
        first_diff_char=first_diff_token * 3,
        first_diff_token=first_diff_token,
        compared_tokens=compared,
        agreement=first_diff_token / compared,
        baseline_token="a",
        speculative_token="b",
        baseline_context="",
        speculative_context="",
    )


LOSSLESS = Lossless(
    applicable=True,
    prompts_compared=4,
    exact_matches=1,
    mismatches=[
        _mismatch("structured", 98, 100),  # late: 98% agreed
        _mismatch("structured", 10, 100),  # early
        _mismatch("open_ended", 99, 100),  # late
    ],
)


def test_every_mismatch_counts_at_the_local_bar() -> None:
    assert lossless_failures_by_class(LOSSLESS, LOCAL_LOSSLESS_AGREEMENT) == {
        "structured": 2,
        "open_ended": 1,
    }


def test_only_early_divergence_counts_at_the_neuron_tolerance() -> None:
    assert lossless_failures_by_class(LOSSLESS, 0.95) == {"structured": 1}


def test_nothing_counts_when_the_check_does_not_apply() -> None:
    sampled = LOSSLESS.model_copy(update={"applicable": False})
    assert lossless_failures_by_class(sampled, 1.0) == {}


def test_the_run_records_the_bar_of_its_servers() -> None:
    config = build_config({"experiment": {"guardrails": {"lossless_min_prefix_agreement": 0.9}}})
    assert analysis_info(config, local=True).lossless_min_prefix_agreement == 1.0
    assert analysis_info(config).lossless_min_prefix_agreement == 0.9
