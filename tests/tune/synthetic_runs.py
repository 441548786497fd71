"""Synthetic sweeps for the tune tests: servers whose step cost and acceptance are known
exactly (T(k) = C0 + C1 k; a draft model's drafts accepted as a greedy server accepts them,
from a text whose steps at window 8 cycle through ACCEPTED_AT_8; an EAGLE head's by the
depth in the step, each step's accepted count drawn in turn from EAGLE3_AT_8 whatever the
window and wherever the step starts)."""

from __future__ import annotations

import itertools

from experiment.config import StatisticsConfig
from tune.results import ClassRun, RequestSample, Role, Run, Setting

BASE_STEP = 0.010
TTFT = 0.030
# SD step: 12 ms + 2 ms per draft token (so c0 - t_base = 2 ms of fixed overhead).
C0, C1 = 0.012, 0.002
# The server's truth is greedy: for every output position p, the number L(p) of draft
# tokens in a row it would accept starting there. A step at p with window k accepts
# min(L(p), k) and the next one starts after the target's own token. The text is built so a
# window of 8 accepts exactly ACCEPTED_AT_8 in turn (not geometric: r = 7/8, 6/8, ..., 1/8);
# a smaller window lands elsewhere and does better than those per-position rates say.
ACCEPTED_AT_8 = [0, 7, 3, 2, 6, 4, 1, 5]
BOOT = StatisticsConfig(resamples=300)
# A second drafter, "eagle3" (the local head's candidate name): a cheap step (11 ms + 0.5 ms
# per draft token) that is right far more often on structured text and rarely on open-ended
# text, so each drafter wins one class. It drafts positions 2..k from its own features, so
# how many drafts a step keeps depends on the depth in the step, not on the text: step n
# accepts min(EAGLE3_AT_8[n % 8], k), as the per-position rates describe it.
E0, E1 = 0.011, 0.0005
EAGLE3_AT_8 = {"structured": [5, 7, 6, 7, 3, 4, 6, 7], "open_ended": [0, 1, 0, 0, 2, 0, 1, 0]}


def cycle_of(draft: str | None, prompt_class: str) -> list[int]:
    return EAGLE3_AT_8[prompt_class] if draft == "eagle3" else ACCEPTED_AT_8


def step_cost(draft: str | None) -> tuple[float, float]:
    return (E0, E1) if draft == "eagle3" else (C0, C1)


def draft_runs(total: int, cycle: list[int] = ACCEPTED_AT_8) -> list[int]:
    runs: list[int] = []
    for accepted in itertools.cycle(cycle):
        if len(runs) >= total:
            return runs[:total]
        runs += [accepted - j for j in range(accepted + 1)]
    raise AssertionError


def sample(prompt_id: str, repeat: int, tokens: list[int], step_s: float) -> RequestSample:
    times = [TTFT + i * step_s for i in range(len(tokens))]
    return RequestSample(
        prompt_id=prompt_id,
        repeat=repeat,
        ok=True,
        ttft_s=TTFT,
        e2e_s=times[-1],
        output_tokens=sum(tokens),
        chunk_tokens=tokens,
        chunk_times_s=times,
    )


def sd_tokens(k: int, total: int, cycle: list[int] = ACCEPTED_AT_8) -> list[int]:
    """Tokens per chunk at window k: the prefill's token, then one chunk per target step."""
    runs = draft_runs(total - 1, cycle)
    tokens, position = [1], 0
    while position < len(runs):
        step = min(min(runs[position], k) + 1, len(runs) - position)
        tokens.append(step)
        position += step
    return tokens


def eagle3_tokens(k: int, total: int, cycle: list[int]) -> list[int]:
    """Tokens per chunk at window k when each step's accepted count depends on the step only."""
    tokens, produced = [1], 1
    for accepted in itertools.cycle(cycle):
        if produced >= total:
            return tokens
        step = min(min(accepted, k) + 1, total - produced)
        tokens.append(step)
        produced += step
    raise AssertionError


def make_run(setting: Setting, role: Role, concurrency: int = 1, slow: float = 1.0) -> Run:
    classes = {}
    for name, total in (("structured", 401), ("open_ended", 201)):
        samples = []
        for prompt in range(4):
            if setting.draft is None:
                tokens, step = [1] * total, BASE_STEP * slow
            else:
                c0, c1 = step_cost(setting.draft)
                cycle = cycle_of(setting.draft, name)
                if setting.draft == "eagle3":
                    tokens = eagle3_tokens(setting.k, total, cycle)
                else:
                    tokens = sd_tokens(setting.k, total, cycle)
                step = (c0 + c1 * setting.k) * slow
            samples.append(sample(f"{name}-{prompt}", 0, tokens, step))
        classes[name] = ClassRun(prompt_class=name, samples=samples)
    return Run(setting=setting, role=role, concurrency=concurrency, classes=classes, wall_s=1.0)


def sweep(drafts: tuple[str, ...] = ("d",)) -> list[Run]:
    runs = [make_run(Setting(), "baseline")]
    for draft in drafts:
        runs += [make_run(Setting(draft=draft, k=k), "fit") for k in (2, 8)]
        runs += [make_run(Setting(draft=draft, k=k), "holdout") for k in (4, 6)]
    return runs
