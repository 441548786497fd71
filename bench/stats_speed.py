"""How long the paired bootstrap of a large run takes (issue 12: 10k requests in < 10 s).

Builds two arms of synthetic 600-token records (two prompt classes, SD streams 3 tokens
per chunk) and times, in this process, ``--repeats`` times each: the paired bootstrap alone
(``loadtest.stats.paired_statistics`` with the configured resamples) and the whole
``summarize(run_dir)`` of a run directory holding those records (reading the JSONL,
per-arm metrics, lossless check, bootstrap, cost, verdict, writing summary.json). Prints
the medians with the machine's load average; ``--out`` writes them as JSON.

    python -m bench.stats_speed                  # 10,000 requests per arm, 3 repeats
    python -m bench.stats_speed --requests 2000 --out stats_speed.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from experiment import ExperimentConfig, build_config
from loadtest.analysis import analysis_info
from loadtest.records import RequestRecord, write_records
from loadtest.results import LoadShapeInfo, RequestInfo, RunInfo, SloInfo
from loadtest.stats import paired_statistics
from loadtest.summary import summarize

OUTPUT_TOKENS = 600
CLASSES = ("structured", "open_ended")


def synthetic_arm(arm: str, requests: int, tokens_per_chunk: int, seed: int) -> list[RequestRecord]:
    rng = np.random.default_rng(seed)
    chunks = OUTPUT_TOKENS // tokens_per_chunk
    records = []
    for index in range(requests):
        gap = 0.02 * tokens_per_chunk * rng.lognormal(0.0, 0.3)
        ttft = 0.1 * rng.lognormal(0.0, 0.2)
        times = (ttft + gap * np.arange(chunks)).tolist()
        records.append(
            RequestRecord(
                arm=arm,
                index=index,
                prompt_id=f"p{index % 16}",
                prompt_class=CLASSES[index % len(CLASSES)],
                max_tokens=OUTPUT_TOKENS,
                start=index * 0.5,
                ttft_s=ttft,
                e2e_s=times[-1],
                chunk_times=times,
                chunk_tokens=[tokens_per_chunk] * chunks,
                chunk_texts=["xyz" * tokens_per_chunk] * chunks,
                output_tokens=OUTPUT_TOKENS,
            )
        )
    return records


def write_run_dir(
    run_dir: Path,
    config: ExperimentConfig,
    baseline: list[RequestRecord],
    speculative: list[RequestRecord],
) -> None:
    """A run directory as the runner writes it (run.json, records), without servers."""
    lt = config.loadtest
    urls = {"baseline": "http://baseline", "speculative": "http://speculative"}
    run = RunInfo(
        started_at="2026-01-01T00:00:00Z",
        model=config.serving.target_model,
        urls=urls,
        variant_labels={arm.value: label for arm, label in lt.variant_labels.items()},
        request=RequestInfo(
            model=config.serving.target_model,
            max_tokens=OUTPUT_TOKENS,
            temperature=0.0,
            ignore_eos=True,
            seed=0,
            api="chat",
            timeout_s=lt.request_timeout_s,
        ),
        load_shape=LoadShapeInfo(concurrency=lt.concurrency, max_duration_s=lt.max_duration_s),
        measured_requests=len(baseline),
        warmup_requests=0,
        seed=lt.seed,
        slo=SloInfo.model_validate(lt.slo.model_dump()),
        analysis=analysis_info(config),
    )
    (run_dir / "run.json").write_text(run.model_dump_json())
    write_records(run_dir / "records_baseline.jsonl", baseline)
    write_records(run_dir / "records_speculative.jsonl", speculative)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000, help="measured requests per arm")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, help="write the timings as JSON here")
    args = parser.parse_args(argv)
    config = build_config({})
    settings = config.statistics
    baseline = synthetic_arm("baseline", args.requests, 1, seed=1)
    speculative = synthetic_arm("speculative", args.requests, 3, seed=2)
    timings = []
    for _ in range(args.repeats):
        started = time.perf_counter()
        result = paired_statistics(
            baseline,
            speculative,
            num_speculative_tokens=config.serving.num_speculative_tokens,
            settings=settings,
        )
        timings.append(time.perf_counter() - started)
    summarize_timings = []
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp)
        write_run_dir(run_dir, config, baseline, speculative)
        for _ in range(args.repeats):
            started = time.perf_counter()
            summary = summarize(run_dir)
            summarize_timings.append(time.perf_counter() - started)
    e2e = result.overall.speedup["e2e_ms"]["mean"]
    report = {
        "requests_per_arm": args.requests,
        "resamples": settings.resamples,
        "classes": len(result.by_class),
        "paired_statistics_s": timings,
        "paired_statistics_median_s": statistics.median(timings),
        "summarize_s": summarize_timings,
        "summarize_median_s": statistics.median(summarize_timings),
        "verdict": [v.decision.value for v in summary.verdict],
        "cpu_count": os.cpu_count(),
        "load_average": os.getloadavg(),
        "e2e_mean_speedup": e2e.model_dump(mode="json"),
    }
    print(
        f"{args.requests} requests per arm, {settings.resamples} resamples, {args.repeats} "
        f"repeats: paired_statistics median {report['paired_statistics_median_s']:.2f} s "
        f"({', '.join(f'{t:.2f}' for t in timings)}); whole summarize median "
        f"{report['summarize_median_s']:.2f} s "
        f"({', '.join(f'{t:.2f}' for t in summarize_timings)}); load average "
        f"{report['load_average']}"
    )
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
