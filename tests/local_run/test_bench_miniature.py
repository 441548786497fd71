"""The acceptance replay of ``bench.miniature``: greedy verification accepts the leading run
of agreements, at most k per step, and every step adds one target token."""

from __future__ import annotations

import pytest

from bench.miniature import speculative_acceptance

T, F = True, False


@pytest.mark.parametrize(
    ("agree", "first", "k", "expected"),
    [
        # Perfect draft: 7 + 7 accepted, then one position left (its run is cut by the end).
        ([T] * 17, 0, 7, (15, 21)),
        # Useless draft: one target token per step, nothing accepted.
        ([F] * 5, 0, 7, (0, 35)),
        # A disagreement ends a step's run; the next step starts after the target's token.
        ([T, T, F, T, T, T, T, T, T, T], 0, 3, (8, 9)),
        # Positions of the prompt are not replayed.
        ([F, F, T, T], 2, 2, (2, 2)),
        ([F, F, T, T], 4, 2, (0, 0)),
    ],
)
def test_replay_counts_accepted_and_proposed_tokens(
    agree: list[bool], first: int, k: int, expected: tuple[int, int]
) -> None:
    assert speculative_acceptance(agree, first, k) == expected
