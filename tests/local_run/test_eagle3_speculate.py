"""The chain walk of the EAGLE3 replay (``eagle3.speculate``): what vLLM accepts per step
when the head drafts k tokens and the target verifies them greedily."""

from __future__ import annotations

from local_run.eagle3 import speculate

TOKENS = list(range(100, 110))  # prompt and output; the last position is 9
MISS = -1


def guesses(k: int, hits: dict[tuple[int, int], int]) -> list[list[int]]:
    """``hits[(j, anchor)]``: draft j+1 at that anchor; every other draft misses."""
    return [[hits.get((j, i), MISS) for i in range(len(TOKENS))] for j in range(k)]


def test_each_step_accepts_the_leading_run_and_moves_past_it() -> None:
    # Anchor 1 (the last prompt position) drafts tokens 3, 4, 5: two match. The target's
    # own token follows, so the next anchor is 1 + 2 + 1 = 4, whose drafts 6, 7, 8 all match.
    drafted = guesses(
        3, {(0, 1): 103, (1, 1): 104, (2, 1): 999, (0, 4): 106, (1, 4): 107, (2, 4): 108}
    )
    assert speculate(drafted, TOKENS, prompt_length=2) == [2, 3]


def test_a_miss_after_a_hit_ends_the_run() -> None:
    drafted = guesses(3, {(0, 1): 103, (2, 1): 105})  # draft 3 right, draft 2 wrong
    assert speculate(drafted, TOKENS, prompt_length=2)[0] == 1


def test_no_hit_proposes_once_per_output_token() -> None:
    # Each step then yields the target's one token: anchors 1..7 propose, 8 is the last.
    assert speculate(guesses(3, {}), TOKENS, prompt_length=2) == [0] * 7


def test_drafts_past_the_output_are_not_accepted() -> None:
    drafted = guesses(3, {(0, 7): 109, (1, 7): 110})  # 110 lies past the last token
    assert speculate(drafted, TOKENS, prompt_length=8) == [1]
