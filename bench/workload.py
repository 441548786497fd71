"""The benchmark workload: one scripted stream shape, the concurrency levels, request counts.

Every request gets the same schedule (TTFT, per-chunk gaps, tokens per chunk with
multi-token chunks as speculative decoding produces). The server puts a per-request tag in
the generated text (`` r<server index>.w<token>``) so any instrument's output can be matched
to the server's own log of what it sent, whatever order requests finished in.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.scripted_server import Script

# Mixed 1..5-token chunks (k=7 speculation yields 1..8): 32 tokens in 14 chunks.
DEFAULT_CHUNK_TOKENS = (1, 1, 3, 2, 4, 1, 2, 5, 1, 3, 2, 1, 4, 2)
DEFAULT_LEVELS = (1, 16, 64, 256)
_TAG = re.compile(r"\br(\d+)\.w")


@dataclass
class TaggedScript(Script):
    """A Script whose token text names the request (``r<tag>.w<i>``) for ground-truth matching."""

    tag: int = -1

    def token_text(self, index: int) -> str:
        return f" r{self.tag}.w{index}"


def tag_of(text: str) -> int | None:
    """The server request index a generated text was tagged with (None: untagged)."""
    match = _TAG.search(text or "")
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class Workload:
    ttft_s: float = 0.05
    gap_s: float = 0.02
    chunk_tokens: tuple[int, ...] = DEFAULT_CHUNK_TOKENS
    prompt_words: int = 16  # input length (the scripted server ignores content)
    warmup_requests: int = 2
    request_timeout_s: float = 60.0
    levels: tuple[int, ...] = DEFAULT_LEVELS
    # Requests per level: enough for a p99 and at least three waves of the level's streams.
    requests: dict[int, int] = field(default_factory=lambda: {1: 60, 16: 320, 64: 768, 256: 1536})

    def __post_init__(self) -> None:
        if not self.chunk_tokens or any(n < 1 for n in self.chunk_tokens):
            raise ValueError("workload chunk_tokens must list chunks of at least 1 token each")
        if self.ttft_s < 0 or self.gap_s < 0:
            raise ValueError("workload ttft_s and gap_s must be >= 0 seconds")
        missing = [level for level in self.levels if level not in self.requests]
        if missing:
            raise ValueError(
                f"workload: no request count for concurrency levels {missing}; "
                "add them to Workload.requests"
            )
        for level in self.levels:
            if level < 1 or self.requests[level] < level:
                raise ValueError(
                    f"workload: level {level} needs >= {max(level, 1)} requests to reach its "
                    f"concurrency (has {self.requests[level]})"
                )

    @property
    def output_tokens(self) -> int:
        return sum(self.chunk_tokens)

    def script(self, tag: int) -> TaggedScript:
        return TaggedScript(
            ttft_s=self.ttft_s, chunk_tokens=list(self.chunk_tokens), gaps_s=self.gap_s, tag=tag
        )

    def prompt(self) -> str:
        return " ".join(f"w{i}" for i in range(self.prompt_words))

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["output_tokens"] = self.output_tokens
        data["requests"] = {str(k): v for k, v in self.requests.items()}
        return data
