"""Shared fixtures: scripted servers (ground truth) on ephemeral loopback ports, a fake run
directory, and the check that every summary.json a test writes matches the published schema."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from bench.scripted_server import ScriptedServer
from loadtest.client import RequestParams
from loadtest.records import RequestRecord
from loadtest.transport import StreamSession

SUMMARY_SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "schemas" / "summary.schema.json"


def _summary_schema_errors(summary: dict[str, Any]) -> list[str]:
    """What is wrong with ``summary`` according to docs/schemas/summary.schema.json."""
    schema = json.loads(SUMMARY_SCHEMA.read_text())
    validator = jsonschema.Draft202012Validator(schema)
    return [
        f"{'/'.join(map(str, error.absolute_path))}: {error.message}"
        for error in validator.iter_errors(summary)
    ]


@pytest.fixture
def summary_schema_errors() -> Callable[[dict[str, Any]], list[str]]:
    return _summary_schema_errors


@pytest.fixture(autouse=True)
def summaries_match_the_published_schema(tmp_path: Path) -> Iterator[None]:
    """After each test: every summary.json under its tmp_path validates against the schema."""
    yield
    for path in sorted(tmp_path.rglob("summary.json")):
        errors = _summary_schema_errors(json.loads(path.read_text()))
        assert not errors, f"{path} does not match {SUMMARY_SCHEMA.name}: {errors[:5]}"


@pytest.fixture
def session() -> Iterator[StreamSession]:
    with StreamSession() as s:
        yield s


@pytest.fixture
def params() -> RequestParams:
    return RequestParams(model="test-model", max_tokens=16, timeout_s=2.0)


@pytest.fixture
def new_record():
    def make(index: int = 0) -> RequestRecord:
        return RequestRecord(arm="baseline", index=index, prompt_id="p", prompt_class="c")

    return make


@pytest.fixture
def serve() -> Iterator:
    servers: list[ScriptedServer] = []

    def start(scripts, **kwargs) -> ScriptedServer:
        server = ScriptedServer(scripts, **kwargs).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def _record(
    arm: str,
    index: int,
    cls: str,
    *,
    ttft: float,
    gap: float,
    tokens_per_chunk: int,
    total: int,
    start: float,
    error: str | None = None,
) -> RequestRecord:
    chunks = [tokens_per_chunk] * (total // tokens_per_chunk)
    times = [ttft + i * gap for i in range(len(chunks))]
    return RequestRecord(
        arm=arm,
        index=index,
        prompt_id=f"{cls}-{index % 3}",
        prompt_class=cls,
        max_tokens=total,
        start=start,
        ttft_s=None if error else ttft,
        e2e_s=times[-1] if not error else 0.01,
        chunk_times=[] if error else times,
        chunk_tokens=[] if error else chunks,
        chunk_texts=[] if error else [f" w{i}" for i in range(len(chunks))],
        output_tokens=None if error else total,
        error=error,
        error_detail="scripted" if error else None,
    )


@pytest.fixture
def fake_run_dir(tmp_path, write_run_json):
    """A run directory as the runner writes it, with known records (no servers needed)."""
    import json

    from loadtest.records import write_records

    write_run_json(
        tmp_path,
        variant_labels={"baseline": "Base", "speculative": "SD"},
        prompt_files=[],
        analysis=None,
    )
    for arm, tpc, gap in (("baseline", 1, 0.02), ("speculative", 4, 0.04)):
        records = [
            _record(
                arm,
                i,
                "structured" if i % 2 else "open_ended",
                ttft=0.05 + 0.001 * i,
                gap=gap,
                tokens_per_chunk=tpc,
                total=16,
                start=i * 0.5,
            )
            for i in range(10)
        ]
        records.append(
            _record(
                arm,
                10,
                "structured",
                ttft=0,
                gap=0,
                tokens_per_chunk=1,
                total=1,
                start=5.0,
                error="http_5xx",
            )
        )
        records.append(
            _record(
                arm,
                11,
                "open_ended",
                ttft=0,
                gap=0,
                tokens_per_chunk=1,
                total=1,
                start=5.5,
                error="disconnected_mid_stream",
            )
        )
        write_records(tmp_path / f"records_{arm}.jsonl", records)
        before = after = {}
        if arm == "speculative":
            before = {
                "num_drafts": 0.0,
                "num_draft_tokens": 0.0,
                "num_accepted_tokens": 0.0,
                "num_accepted_tokens_per_pos": {"0": 0.0, "1": 0.0, "2": 0.0},
            }
            after = {
                "num_drafts": 40.0,
                "num_draft_tokens": 280.0,
                "num_accepted_tokens": 120.0,
                "num_accepted_tokens_per_pos": {"0": 40.0, "1": 40.0, "2": 40.0},
            }
        (tmp_path / f"window_{arm}.json").write_text(
            json.dumps(
                {
                    "arm": arm,
                    "stopped_by": "schedule_done",
                    "unfinished_requests": 0,
                    "not_started_requests": 0,
                    "metrics_before": before,
                    "metrics_after": after,
                }
            )
        )
    return tmp_path


# vLLM's default buckets (vllm/v1/metrics/buckets.py: TIME_TO_FIRST_TOKEN_BUCKETS and
# INTER_TOKEN_LATENCY_BUCKETS, the latter also for request_time_per_output_token).
TTFT_EDGES = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5)
ITL_EDGES = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0)


def vllm_metrics_text(observations: dict[str, list[float]], generation_tokens: float) -> str:
    """A /metrics body as vLLM's prometheus_client writes it: each histogram's observations
    split over two engines (label sets the parser must sum), with HELP/TYPE lines, ``le``
    buckets, _sum, _count and _created samples, and the generation-token counter."""
    from guardrails import vllm_metrics

    lines = []
    for name in vllm_metrics.LATENCY_HISTOGRAMS:
        edges = TTFT_EDGES if name == vllm_metrics.TIME_TO_FIRST_TOKEN else ITL_EDGES
        values = observations.get(name, [])
        lines += [f"# HELP {name} histogram", f"# TYPE {name} histogram"]
        for engine in (0, 1):
            mine = values[engine::2]
            labels = f'engine="{engine}",model_name="tiny"'
            for edge in (*edges, float("inf")):
                le = "+Inf" if edge == float("inf") else repr(edge)
                count = sum(1 for v in mine if v <= edge)
                lines.append(f'{name}_bucket{{{labels},le="{le}"}} {float(count)}')
            lines.append(f"{name}_count{{{labels}}} {float(len(mine))}")
            lines.append(f"{name}_sum{{{labels}}} {sum(mine)!r}")
            lines.append(f"{name}_created{{{labels}}} 1.7e9")
    counter = vllm_metrics.GENERATION_TOKENS
    lines += [
        f"# TYPE {counter} counter",
        f'{counter}_total{{engine="0",model_name="tiny"}} {generation_tokens / 2!r}',
        f'{counter}_total{{engine="1",model_name="tiny"}} {generation_tokens / 2!r}',
        f'{counter}_created{{engine="0",model_name="tiny"}} 1.7e9',
    ]
    return "\n".join(lines) + "\n"


def _add_server_histograms(
    run_dir: Path, arm: str, observations: dict[str, list[float]], generation_tokens: float
) -> None:
    """Give ``window_<arm>.json`` the scrapes of a server that observed ``observations``
    (seconds, by histogram) and generated ``generation_tokens`` during the window."""
    from loadtest.server_latency import parse_histograms

    path = run_dir / f"window_{arm}.json"
    window = json.loads(path.read_text())
    window["histograms_before"] = parse_histograms(vllm_metrics_text({}, 0.0)).model_dump()
    after = parse_histograms(vllm_metrics_text(observations, generation_tokens))
    window["histograms_after"] = after.model_dump()
    path.write_text(json.dumps(window))


@pytest.fixture
def add_server_histograms() -> Callable[..., None]:
    return _add_server_histograms


def _fake_run_observations(arm: str) -> tuple[dict[str, list[float]], float]:
    """What the servers behind ``fake_run_dir`` observed: its ten good requests per arm of 16
    tokens (baseline: one token per 20 ms step; SD: four tokens per 40 ms step)."""
    from guardrails import vllm_metrics

    steps, gap = (15, 0.02) if arm == "baseline" else (3, 0.04)
    return {
        vllm_metrics.TIME_TO_FIRST_TOKEN: [0.05 + 0.001 * i for i in range(10)],
        vllm_metrics.INTER_TOKEN_LATENCY: [gap] * steps * 10,
        vllm_metrics.TIME_PER_OUTPUT_TOKEN: [steps * gap / 15] * 10,
    }, 160.0


@pytest.fixture
def fake_server_observations() -> Callable[[str], tuple[dict[str, list[float]], float]]:
    return _fake_run_observations


@pytest.fixture
def metrics_text() -> Callable[[dict[str, list[float]], float], str]:
    return vllm_metrics_text
