"""AIPerf (NVIDIA's ``aiperf``, PyPI), the closest peer tool, as a bench instrument.

It runs from its own venv, which the bench creates and fills on first use
(``ensure_aiperf``): AIPerf 0.13.0 pins rich~=14.1, psutil~=7.0, pyzmq~=26.4,
prometheus-client~=0.23, pillow~=12.3 and huggingface-hub<2 (its wheel's METADATA), so
installing it into the project's venv would downgrade seven packages vLLM and Locust
import, and add 56 more (dashboards, optuna, pyarrow). The venv sits under ``.cache/``
(ignored by git), like the bench's tokenizer.

One run: ``aiperf profile`` on the bench workload (completions API, streaming, the same
input/output lengths, request count, concurrency and warm-ups as the other instruments,
one connection per request), ``--export-level raw``. Two of its exports are read:

- ``profile_export.jsonl``: one line per request with the metrics AIPerf reports for it
  (``time_to_first_token``, ``inter_chunk_latency`` [one gap per chunk],
  ``inter_token_latency`` [one value per request], ``request_latency``,
  ``output_sequence_length``), in milliseconds;
- ``profile_export_raw.jsonl``: the same requests with ``start_perf_ns`` (AIPerf's
  ``time.perf_counter_ns``, CLOCK_MONOTONIC like every other instrument's and the truth's
  clock) and the streamed text, which carries the truth server's request tag.

The two are joined on ``metadata.x_request_id``.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.accuracy import Observation
from bench.instruments import MODEL_NAME, PROJECT_ROOT, bound_s
from bench.workload import Workload, tag_of

# Pinned here only; the bench records it in results.json (meta.aiperf_version).
AIPERF_VERSION = "0.13.0"
DEFAULT_VENV = PROJECT_ROOT / ".cache" / "bench" / "aiperf-venv"
INSTALL_TIMEOUT_S = 1800.0
RECORDS_FILE = "profile_export.jsonl"
RAW_FILE = "profile_export_raw.jsonl"
PROFILING_PHASE = "profiling"  # warm-up requests are exported too, as phase "warmup"


def executable(venv: Path) -> Path:
    return venv / "bin" / "aiperf"


def ensure_aiperf(venv: Path = DEFAULT_VENV, log_path: Path | None = None) -> Path:
    """Create ``venv`` with aiperf==AIPERF_VERSION unless it is there; return the CLI path.

    Uses the venv's own pip, so the machine's pip configuration (indexes, wheel
    directories, constraints) applies as for any other install. A lock file keeps two
    benches from installing into the same venv at once.
    """
    stamp = venv / f".installed-aiperf-{AIPERF_VERSION}"
    if stamp.is_file() and executable(venv).is_file():
        return executable(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    log_path = log_path or venv.parent / "aiperf-install.log"
    with (venv.parent / ".aiperf-venv.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.is_file() and executable(venv).is_file():
            return executable(venv)
        with log_path.open("w") as log:
            for command in (
                [sys.executable, "-m", "venv", "--clear", str(venv)],
                [
                    str(venv / "bin" / "python"),
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    f"aiperf=={AIPERF_VERSION}",
                ],
            ):
                log.write(f"$ {' '.join(command)}\n")
                log.flush()
                try:
                    done = subprocess.run(
                        command,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        check=False,
                        timeout=INSTALL_TIMEOUT_S,
                    )
                except subprocess.TimeoutExpired as err:
                    raise RuntimeError(
                        f"installing aiperf=={AIPERF_VERSION} into {venv} took over "
                        f"{INSTALL_TIMEOUT_S:.0f} s; see {log_path}, or skip it with --no-aiperf"
                    ) from err
                if done.returncode != 0:
                    raise RuntimeError(
                        f"installing aiperf=={AIPERF_VERSION} into {venv} failed "
                        f"(exit {done.returncode}); see {log_path}, or skip it with --no-aiperf"
                    )
        stamp.touch()
    return executable(venv)


def aiperf_command(
    aiperf: Path,
    workload: Workload,
    level: int,
    url: str,
    out_dir: Path,
    tokenizer_dir: Path,
) -> list[str]:
    """``aiperf profile`` on the bench workload. Flags: the aiperf 0.13.0 wheel's
    aiperf/config/flags/cli_config.py (repo ai-dynamo/aiperf), checked with
    ``aiperf profile --help``; modules named below are paths in that wheel."""
    return [
        str(aiperf),
        "profile",
        "--model",
        MODEL_NAME,
        "--url",
        url,
        # OpenAI /v1/completions, streamed (EndpointType.COMPLETIONS).
        "--endpoint-type",
        "completions",
        "--streaming",
        # A local directory: aiperf/common/tokenizer.py resolve_alias() returns a path
        # unchanged and transformers loads it from disk (see aiperf_env for why not offline mode).
        "--tokenizer",
        str(tokenizer_dir.resolve()),
        # Output lengths from the server's usage (stream_options.include_usage), not from
        # re-tokenizing. --per-chunk-usage (continuous usage) would only correct the first
        # chunk's token count and is rejected for completions (config/endpoint.py:
        # "--per-chunk-usage requires endpoint type 'chat'").
        "--use-server-token-count",
        "--synthetic-input-tokens-mean",
        str(workload.prompt_words),
        "--synthetic-input-tokens-stddev",
        "0",
        "--output-tokens-mean",
        str(workload.output_tokens),
        "--output-tokens-stddev",
        "0",
        "--extra-inputs",
        "ignore_eos:true",
        "--extra-inputs",
        "temperature:0",
        "--concurrency",
        str(level),
        "--request-count",
        str(workload.requests[level]),
        "--warmup-request-count",
        str(workload.warmup_requests),
        "--random-seed",
        "0",
        *aiperf_run_flags(out_dir),
    ]


def aiperf_run_flags(out_dir: Path) -> list[str]:
    """The flags every bench run of ``aiperf profile`` ends with: how it connects, what it
    exports and where, and no UI or telemetry."""
    return [
        # One connection per request, as the other instruments (the truth server closes).
        "--connection-reuse-strategy",
        "never",
        # records: profile_export.jsonl (per-request metrics); raw adds
        # profile_export_raw.jsonl (start_perf_ns and the streamed text).
        "--export-level",
        "raw",
        "--artifact-dir",  # absolute: AIPerf runs in the run directory
        str(out_dir.resolve()),
        "--ui-type",
        "none",
        "--no-server-metrics",
        "--no-gpu-telemetry",
    ]


def aiperf_env() -> dict[str, str]:
    """AIPerf's environment: never the hub, and not HF offline mode.

    With HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE set, AIPerf 0.13 looks every tokenizer name
    up in the hub cache (aiperf/common/tokenizer.py: _load_from_hub -> _from_pretrained_local
    -> snapshot_download(local_files_only=True)), and a directory path fails there. So both
    are unset, and HF_ENDPOINT points at a closed local port: should anything try the hub,
    it fails instead of downloading.
    """
    offline = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    env = {k: v for k, v in os.environ.items() if k not in offline}
    env["HF_ENDPOINT"] = "http://127.0.0.1:9"
    env["TOKENIZERS_PARALLELISM"] = "false"
    return env


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _text(raw: dict[str, Any]) -> str:
    """The completion text of one raw record (its SSE data packets' ``choices[].text``)."""
    parts: list[str] = []
    for response in raw.get("responses") or []:
        for packet in response.get("packets") or []:
            if packet.get("name") != "data":
                continue
            try:
                data = json.loads(packet.get("value") or "")
            except json.JSONDecodeError:
                continue  # [DONE]
            if isinstance(data, dict):
                parts.extend(choice.get("text") or "" for choice in data.get("choices") or [])
    return "".join(parts)


def _ms(metrics: dict[str, Any], name: str) -> Any:
    metric = metrics.get(name)
    if metric is None:
        return None
    if metric.get("unit") != "ms":
        raise ValueError(f"aiperf {name} is in {metric.get('unit')!r}, expected 'ms'")
    return metric["value"]


def observations_from_aiperf(
    records: list[dict[str, Any]], raw: list[dict[str, Any]]
) -> list[Observation]:
    """AIPerf's profiling-phase requests as Observations.

    Chunk arrivals are what AIPerf reports: start + time_to_first_token, then each
    inter_chunk_latency; the request's ITL is its inter_token_latency, one value for the
    whole request ((request_latency - TTFT) / (output tokens - 1), aiperf
    metrics/types/inter_token_latency_metric.py), which is what the per-token ITL error
    compares with every token's true ITL.
    """
    raw_by_id = {r["metadata"]["x_request_id"]: r for r in raw}
    out = []
    for record in records:
        meta = record["metadata"]
        if meta.get("benchmark_phase") != PROFILING_PHASE:
            continue
        request_id = meta["x_request_id"]
        if request_id not in raw_by_id:
            raise ValueError(
                f"aiperf request {request_id} is in {RECORDS_FILE} but not in {RAW_FILE}; "
                "run it with --export-level raw"
            )
        raw_record = raw_by_id[request_id]
        start = raw_record["start_perf_ns"] / 1e9
        metrics = record.get("metrics") or {}
        ttft = _ms(metrics, "time_to_first_token")
        gaps = _ms(metrics, "inter_chunk_latency") or []
        arrivals: list[float] = []
        if ttft is not None:
            arrivals.append(start + ttft / 1000.0)
            for gap in gaps:
                arrivals.append(arrivals[-1] + gap / 1000.0)
        latency = _ms(metrics, "request_latency")
        itl = _ms(metrics, "inter_token_latency")
        osl = metrics.get("output_sequence_length")
        error = record.get("error")
        out.append(
            Observation(
                tag=tag_of(_text(raw_record)),
                start=start,
                chunk_arrivals=arrivals,
                chunk_tokens=None,
                output_tokens=int(osl["value"]) if osl else None,
                end=start + latency / 1000.0 if latency is not None else None,
                error=(error.get("message") or json.dumps(error)) if error else None,
                request_itl_s=itl / 1000.0 if itl is not None else None,
            )
        )
    return out


def run_aiperf(
    workload: Workload,
    level: int,
    url: str,
    run_dir: Path,
    tokenizer_dir: Path,
    venv: Path = DEFAULT_VENV,
) -> tuple[list[Observation], dict[str, Any]]:
    aiperf = ensure_aiperf(venv)
    run_dir.mkdir(parents=True, exist_ok=True)
    out_dir = run_dir / "aiperf"
    log_path = run_dir / "aiperf.log"
    requests = workload.requests[level]
    command = aiperf_command(aiperf, workload, level, url, out_dir, tokenizer_dir)
    returncode: int | None = None
    with log_path.open("w") as log:
        try:
            done = subprocess.run(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=aiperf_env(),
                cwd=run_dir,
                check=False,
                # AIPerf starts a dozen services (ZMQ) before the first request: ~10 s.
                timeout=bound_s(workload, level, requests) + 120,
            )
            returncode = done.returncode
        except subprocess.TimeoutExpired:
            returncode = None
    records_path, raw_path = out_dir / RECORDS_FILE, out_dir / RAW_FILE
    if returncode != 0 or not records_path.is_file() or not raw_path.is_file():
        raise RuntimeError(f"aiperf profile failed (exit {returncode}); see {log_path}")
    records = read_jsonl(records_path)
    observations = observations_from_aiperf(records, read_jsonl(raw_path))
    workers = sorted({r["metadata"].get("worker_id") for r in records})
    return observations, {
        "returncode": returncode,
        "aiperf_version": AIPERF_VERSION,
        "workers": len(workers),
    }
