"""How long the paired bootstrap of a large run takes (issue 12: 10k requests in < 10 s).

Builds two arms of synthetic 600-token records (two prompt classes, SD streams 3 tokens
per chunk) and times ``loadtest.stats.paired_statistics`` with the configured resamples,
in this process, ``--repeats`` times; prints the median and every repetition with the
machine's load average, and writes them as JSON with ``--out``.

    python -m bench.stats_speed                  # 10,000 requests per arm, 3 repeats
    python -m bench.stats_speed --requests 2000 --out stats_speed.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

from experiment import build_config
from loadtest.records import RequestRecord
from loadtest.stats import BootstrapSettings, paired_statistics

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
                ttft_s=ttft,
                e2e_s=times[-1],
                chunk_times=times,
                chunk_tokens=[tokens_per_chunk] * chunks,
                chunk_texts=["x"] * chunks,
                output_tokens=OUTPUT_TOKENS,
            )
        )
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000, help="measured requests per arm")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, help="write the timings as JSON here")
    args = parser.parse_args(argv)
    config = build_config({})
    settings = BootstrapSettings(
        confidence=config.statistics.confidence,
        resamples=config.statistics.resamples,
        seed=config.statistics.seed,
    )
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
    e2e = result.overall.speedup["e2e_ms"]["mean"]
    report = {
        "requests_per_arm": args.requests,
        "resamples": settings.resamples,
        "classes": len(result.by_class),
        "seconds": timings,
        "median_s": statistics.median(timings),
        "cpu_count": os.cpu_count(),
        "load_average": os.getloadavg(),
        "e2e_mean_speedup": e2e.model_dump(mode="json"),
    }
    print(
        f"paired_statistics, {args.requests} requests per arm, {settings.resamples} resamples: "
        f"median {report['median_s']:.2f} s over {args.repeats} "
        f"({', '.join(f'{t:.2f}' for t in timings)}); load average {report['load_average']}"
    )
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
