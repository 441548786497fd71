"""Prompt suites (JSONL data files) and the request schedule both arms share.

A suite file holds one JSON object per line: ``{"id": ..., "class": ..., "prompt": ...}``
plus an optional ``"kind"`` (repeat, count, json, code, ...). ``class`` is what the report
and CloudWatch group by (``structured``, ``open_ended``, or a class of your own). Add a file
of your own with ``loadtest.prompts.files`` in the configuration (``-c
loadtest.prompts.files='["my.jsonl"]'``).

The schedule is a seeded shuffle of every prompt repeated ``requests_per_prompt`` times;
both arms get the identical list (same order, same seed). Warm-up requests come first and
are excluded from every statistic.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from experiment.loading import PROJECT_ROOT

if TYPE_CHECKING:
    from loadtest.traffic import TrafficRequest


@dataclass(frozen=True)
class Prompt:
    id: str
    prompt_class: str
    text: str
    kind: str = ""
    # A replayed request (loadtest.traffic): its own conversation, output length and input
    # tokens (bucketed by the report); None for the suite's single-turn prompts (text,
    # loadtest.max_tokens).
    messages: list[dict[str, str]] | None = None
    max_tokens: int | None = None
    input_tokens: int | None = None


@dataclass(frozen=True)
class ScheduleItem:
    index: int  # position among the measured requests (warm-up: negative)
    prompt: Prompt
    warmup: bool = False
    arrival_s: float | None = None  # open loop: offset of its arrival from the window start

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScheduleItem:
        return cls(
            index=data["index"],
            prompt=Prompt(**data["prompt"]),
            warmup=data.get("warmup", False),
            arrival_s=data.get("arrival_s"),
        )


def resolve_path(path: str | Path) -> Path:
    file = Path(path)
    return file if file.is_absolute() or file.exists() else PROJECT_ROOT / file


def load_prompt_file(path: str | Path) -> list[Prompt]:
    file = resolve_path(path)
    if not file.is_file():
        raise ValueError(f"prompt file {str(path)!r} does not exist; check loadtest.prompts.files")
    prompts = []
    for number, line in enumerate(file.read_text().splitlines(), 1):
        if not line.strip():
            continue
        where = f"{file}:{number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{where}: not JSON ({err}); write one object per line") from None
        missing = [key for key in ("id", "class", "prompt") if not data.get(key)]
        if missing:
            raise ValueError(
                f'{where}: missing {missing}; each line needs {{"id", "class", "prompt"}}'
            )
        prompts.append(
            Prompt(
                id=str(data["id"]),
                prompt_class=str(data["class"]),
                text=str(data["prompt"]),
                kind=str(data.get("kind", "")),
            )
        )
    if not prompts:
        raise ValueError(f"prompt file {file} holds no prompts")
    return prompts


def load_prompts(files: list[str] | list[Path]) -> list[Prompt]:
    prompts: list[Prompt] = []
    for file in files:
        prompts.extend(load_prompt_file(file))
    seen: set[str] = set()
    for prompt in prompts:
        if prompt.id in seen:
            raise ValueError(f"prompt id {prompt.id!r} appears twice; prompt ids must be unique")
        seen.add(prompt.id)
    return prompts


def build_schedule(
    prompts: list[Prompt],
    *,
    requests_per_prompt: int,
    seed: int,
    warmup_requests: int = 0,
    request_rate: float | None = None,
    max_requests: int | None = None,
) -> list[ScheduleItem]:
    """Warm-up items, then the measured items; identical for both arms given the same inputs."""
    if not prompts:
        raise ValueError("no prompts to schedule")
    rng = random.Random(seed)
    measured = [p for p in prompts for _ in range(requests_per_prompt)]
    rng.shuffle(measured)
    if max_requests is not None:
        measured = measured[:max_requests]
    warmup = [
        ScheduleItem(index=-(i + 1), prompt=prompts[i % len(prompts)], warmup=True)
        for i in range(warmup_requests)
    ]
    arrivals: list[float | None] = [None] * len(measured)
    if request_rate is not None:
        if request_rate <= 0:
            raise ValueError(f"request rate {request_rate} must be > 0 requests/s")
        clock = 0.0
        for i in range(len(measured)):
            arrivals[i] = clock
            clock += rng.expovariate(request_rate)  # Poisson arrivals
    items = [ScheduleItem(index=i, prompt=p, arrival_s=arrivals[i]) for i, p in enumerate(measured)]
    return warmup + items


def traffic_schedule(
    requests: Sequence[TrafficRequest],
    *,
    time_scale: float = 1.0,
    warmup_requests: int = 0,
    max_requests: int | None = None,
) -> list[ScheduleItem]:
    """A trace's schedule: every request once, in arrival order, at its recorded offset times
    ``time_scale`` (the open loop's arrival times), with its own messages and output length.
    Warm-up: the trace's first requests again, unmeasured."""
    if not requests:
        raise ValueError("no traffic to schedule")
    if time_scale <= 0:
        raise ValueError(f"time scale {time_scale} must be > 0")
    prompts = [
        Prompt(
            id=r.id,
            prompt_class=r.prompt_class,
            text="",
            messages=[m.model_dump() for m in r.messages],
            max_tokens=r.output_tokens,
            input_tokens=r.input_tokens,
        )
        for r in sorted(requests, key=lambda r: r.offset_s)
    ]
    offsets = sorted(r.offset_s for r in requests)
    if max_requests is not None:
        prompts, offsets = prompts[:max_requests], offsets[:max_requests]
    warmup = [
        ScheduleItem(index=-(i + 1), prompt=prompts[i % len(prompts)], warmup=True)
        for i in range(warmup_requests)
    ]
    items = [
        ScheduleItem(index=i, prompt=p, arrival_s=offsets[i] * time_scale)
        for i, p in enumerate(prompts)
    ]
    return warmup + items
