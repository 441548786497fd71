"""Synthetic sweeps for the tune tests: servers whose step cost and acceptance are known
exactly (T(k) = C0 + C1 k; drafts accepted as a greedy server accepts them, from a text
whose steps at window 8 cycle through ACCEPTED_AT_8)."""

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


def draft_runs(total: int) -> list[int]:
    runs: list[int] = []
    for accepted in itertools.cycle(ACCEPTED_AT_8):
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


def sd_tokens(k: int, total: int) -> list[int]:
    """Tokens per chunk at window k: the prefill's token, then one chunk per target step."""
    runs = draft_runs(total - 1)
    tokens, position = [1], 0
    while position < len(runs):
        step = min(min(runs[position], k) + 1, len(runs) - position)
        tokens.append(step)
        position += step
    return tokens


def make_run(setting: Setting, role: Role, concurrency: int = 1, slow: float = 1.0) -> Run:
    classes = {}
    for name, total in (("structured", 401), ("open_ended", 201)):
        samples = []
        for prompt in range(4):
            if setting.draft is None:
                tokens, step = [1] * total, BASE_STEP * slow
            else:
                tokens, step = sd_tokens(setting.k, total), (C0 + C1 * setting.k) * slow
            samples.append(sample(f"{name}-{prompt}", 0, tokens, step))
        classes[name] = ClassRun(prompt_class=name, samples=samples)
    return Run(setting=setting, role=role, concurrency=concurrency, classes=classes, wall_s=1.0)


def sweep() -> list[Run]:
    runs = [make_run(Setting(), "baseline")]
    runs += [make_run(Setting(draft="d", k=k), "fit") for k in (2, 8)]
    runs += [make_run(Setting(draft="d", k=k), "holdout") for k in (4, 6)]
    return runs
