"""Synthetic sweeps for the tune tests: servers whose step cost and acceptance are known
exactly (T(k) = C0 + C1 k, accepted tokens per step cycling through ACCEPTED_AT_8)."""

from __future__ import annotations

import itertools

from tune.analysis import Bootstrap
from tune.results import ClassRun, RequestSample, Role, Run, Setting

BASE_STEP = 0.010
TTFT = 0.030
# SD step: 12 ms + 2 ms per draft token (so c0 - t_base = 2 ms of fixed overhead).
C0, C1 = 0.012, 0.002
# Accepted tokens per step at K=8, cycling; at smaller k a step accepts min(a, k): the
# greedy property the method rests on. Not geometric: r = 7/8, 6/8, 5/8, 4/8, 3/8, 2/8, 2/8, 1/8.
ACCEPTED_AT_8 = [0, 8, 3, 2, 7, 4, 1, 5]
BOOT = Bootstrap(resamples=300)


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
    tokens, left = [1], total - 1
    for accepted in itertools.cycle(ACCEPTED_AT_8):
        if left <= 0:
            return tokens
        step = min(min(accepted, k) + 1, left)
        tokens.append(step)
        left -= step
    raise AssertionError


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
