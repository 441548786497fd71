"""The summary of a run directory: records + window files (loadtest.window) + run.json ->
``RunSummary``.

``summarize(run_dir)`` recomputes everything from the raw files, so a report can be rebuilt
from any run directory (``python -m loadtest report RUN_DIR``) without rerunning the load.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from experiment.config import TIERED_ARM, Arm, LoadTestConfig, StatisticsConfig
from loadtest.acceptance import (
    acceptance_from_deltas,
    best_acceptance,
    decode_tokens,
    request_acceptance,
)
from loadtest.analysis import analyse
from loadtest.arms import arms_timing, timing_warnings
from loadtest.lossless import lossless_check
from loadtest.metrics import (
    BURST_GAP_S,
    BURST_WARNING_FRACTION,
    arm_metrics,
    bursting,
    compare_arms,
)
from loadtest.records import RequestRecord, read_records
from loadtest.results import (
    SCHEMA_VERSION,
    Acceptance,
    AcceptanceSource,
    ArmRequestAcceptance,
    ArmServerLatency,
    ArmSummary,
    CloudWatchResult,
    GatewayCost,
    LatencySource,
    RunInfo,
    RunSummary,
    ServerComparison,
)
from loadtest.server_latency import (
    ArmServerDeltas,
    ScrapeWindow,
    arm_server_latency,
    compare_servers,
)
from loadtest.tiered import tiered_comparison, tiered_warnings
from loadtest.window import NOT_RUN, WindowMeta

RUN_JSON = "run.json"
# The gateway's own cost during the tiered arm, when the caller measured it (the local run's
# Envoy: runner.GatewayMeter); read into TieredComparison.gateway.
GATEWAY_JSON = "gateway_tiered.json"
SUMMARY_JSON = "summary.json"
LOAD_GENERATOR_CPU_WARNING = 0.8
# Above this share of reads stamped by the client's clock (no kernel receive timestamp:
# TLS, non-Linux), TTFT and ITL include the client's own scheduling delay (bench/README.md).
USER_STAMP_WARNING_FRACTION = 0.1


def _burst_cause(load_generator_cpu: float | None) -> str:
    if load_generator_cpu is None:
        return "server or load generator CPU-starved?"
    if load_generator_cpu > LOAD_GENERATOR_CPU_WARNING:
        return "the load generator was busy: see the CPU warning"
    # The client reads each chunk within ~1 ms at this load (bench/README.md), so an idle
    # client means the server wrote them together.
    return (
        f"the Locust process used only {load_generator_cpu:.0%} of a core, so the server "
        "sent them together"
    )


def read_run_info(run_dir: Path) -> RunInfo:
    run_file = run_dir / RUN_JSON
    if not run_file.is_file():
        raise ValueError(f"{run_dir} is not a load-test run directory (no {RUN_JSON})")
    try:
        return RunInfo.model_validate_json(run_file.read_text())
    except ValidationError as err:
        raise ValueError(
            f"{run_file} cannot be read by this version of the load test ({err.error_count()} "
            f"problems, first: {err.errors()[0]['loc']}: {err.errors()[0]['msg']}); rebuild "
            "its report with the version that ran it"
        ) from None


def _arm_warnings(
    arm: str, block: ArmSummary, max_tokens: int, skew_warning_ms: float
) -> list[str]:
    warnings = []
    overall = block.overall
    if block.stopped_by != "schedule_done":
        warnings.append(
            f"{arm}: stopped by {block.stopped_by} with {block.unfinished_requests} requests "
            f"in flight and {block.not_started_requests} not started"
        )
    if overall.length_mismatches:
        warnings.append(
            f"{arm}: {overall.length_mismatches} responses differ from "
            f"max_tokens={max_tokens} (ignore_eos ignored?)"
        )
    burst = overall.burst_gap_fraction
    cpu = block.load_generator_cpu
    if burst is not None and burst > BURST_WARNING_FRACTION:
        warnings.append(
            f"{arm}: {burst:.0%} of chunk gaps are under {BURST_GAP_S * 1000:.1f} ms: "
            f"chunks arrived in bursts ({_burst_cause(cpu)}); ITL and TPOT describe "
            "arrival at the client, not generation"
        )
    if cpu is not None and cpu > LOAD_GENERATOR_CPU_WARNING:
        warnings.append(
            f"{arm}: the Locust process used {cpu:.0%} of a core: the load generator "
            "may be the bottleneck (lower concurrency or use a bigger machine)"
        )
    if overall.inexact_token_accounting:
        warnings.append(
            f"{arm}: {overall.inexact_token_accounting} responses had no "
            "per-chunk usage; their tokens per chunk are counted as 1 (inexact)"
        )
    if overall.failed:
        warnings.append(f"{arm}: {overall.failed} failed requests {overall.failures_by_reason}")
    if block.lost_workers:
        warnings.append(
            f"{arm}: Locust worker(s) {block.lost_workers} of {block.workers} were lost "
            "mid-run; their unsent requests count as not started"
        )
    stamps = block.arrival_stamps
    reads = stamps.kernel + stamps.user if stamps is not None else 0
    if stamps is not None and reads and stamps.user / reads > USER_STAMP_WARNING_FRACTION:
        warnings.append(
            f"{arm}: {stamps.user / reads:.0%} of {reads} reads had no usable kernel receive "
            "timestamp (the kernel attached none or an impossible one, which happens to part "
            "of the reads even over plain http on Linux; over TLS or off Linux every read): "
            "their arrival is when the client got to read them, so TTFT and ITL include the "
            "client's scheduling delay (keep streams per worker within the budget of "
            "bench/README.md)"
        )
    warnings += _request_acceptance_warnings(arm, block)
    server = block.server_latency
    if server is not None and (server.failed_scrapes or server.malformed_lines):
        warnings.append(
            f"{arm}: {server.failed_scrapes} of {server.scrapes} /metrics scrapes could not be "
            f"read and {server.malformed_lines} lines of its latency histograms could not be "
            "parsed (skipped): the server-side figures "
            + ("are not available" if not server.available else "leave them out")
        )
    if block.clock_skew_ms is not None and block.clock_skew_ms > skew_warning_ms:
        warnings.append(
            f"{arm}: the workers' wall clocks differ by {block.clock_skew_ms:.1f} ms (over "
            f"{skew_warning_ms:g} ms): the window and throughput are off by up to that much "
            "(per-request metrics are not: each is on one worker's clock)"
        )
    return warnings


def _request_acceptance_warnings(arm: str, block: ArmSummary) -> list[str]:
    """Per-request figures missing on some responses, or sums the counters contradict."""
    per_request = block.request_acceptance
    if per_request is None:
        return []
    warnings = []
    overall = per_request.overall
    if overall.missing:
        warnings.append(
            f"{arm}: per-request acceptance figures missing on {overall.missing} of "
            f"{overall.requests} requests: the arm's acceptance is not per request but "
            f"{block.acceptance.source.value}, and each class's per-request figure covers only "
            "the requests that carried them (never filled in with estimates)"
        )
    reconciliation = per_request.reconciliation
    if reconciliation is not None and not reconciliation.agrees:
        warnings.append(
            f"{arm}: per-request acceptance and the /metrics counters disagree: "
            f"{reconciliation.reason}"
        )
    return warnings


def skew_warning_ms(run: RunInfo) -> float:
    """The clock-skew warning bound the run was configured with (default for older runs)."""
    value = run.loadtest_config.get("clock_skew_warning_ms")
    return float(value if value is not None else LoadTestConfig().clock_skew_warning_ms)


def scrape_windows(meta: WindowMeta) -> list[ScrapeWindow]:
    """The arm's windows with their /metrics scrapes: one per block of an alternating arm,
    else the one window (none when the arm never ran)."""
    if meta.blocks:
        return [
            ScrapeWindow(b.histograms_before, b.histograms_after, b.first_index, b.last_index)
            for b in meta.blocks
            if b.stopped_by != NOT_RUN
        ]
    if meta.stopped_by == NOT_RUN:
        return []
    return [ScrapeWindow(meta.histograms_before, meta.histograms_after)]


def _arm_summary(
    run: RunInfo,
    arm: str,
    records: list[RequestRecord],
    meta: WindowMeta,
    acceptance: Acceptance,
    server: ArmServerLatency | None = None,
    per_request: ArmRequestAcceptance | None = None,
) -> ArmSummary:
    segments = [(block.first_index, block.last_index) for block in meta.blocks]
    metrics = arm_metrics(records, run.slo.model_dump(), segments)
    return ArmSummary(
        label=run.variant_labels[arm],
        url=run.urls[arm],
        stopped_by=meta.stopped_by,
        unfinished_requests=meta.unfinished_requests,
        load_generator_cpu=meta.load_generator_cpu,
        workers=meta.workers,
        worker_cpu=meta.worker_cpu,
        lost_workers=meta.lost_workers,
        clock_skew_ms=meta.clock_skew_ms,
        arrival_stamps=meta.arrival_stamps,
        not_started_requests=meta.not_started_requests,
        window_s=metrics.window_s,
        warmup_excluded=metrics.warmup_excluded,
        arrival_lag_ms=metrics.arrival_lag_ms,
        overall=metrics.overall,
        by_class=metrics.by_class,
        length_mismatch_examples=metrics.length_mismatch_examples,
        acceptance=acceptance,
        server_latency=server,
        request_acceptance=per_request,
    )


# The gateway has no counters of its own: its /metrics is the baseline's (the catch-all
# route), so a delta there would be mislabelled as the tiered arm's.
TIERED_ACCEPTANCE = Acceptance(
    available=False,
    source=AcceptanceSource.NOT_AVAILABLE,
    reason="the tiered arm is the gateway in front of both servers: its SD classes' "
    "acceptance is the speculative arm's",
)


def window_acceptance(meta: WindowMeta, arm: Arm, records: list[RequestRecord]) -> Acceptance:
    """The arm's acceptance from the /metrics scrapes its window file recorded."""
    return acceptance_from_deltas(
        meta.metrics_before,
        meta.metrics_after,
        speculative=arm is Arm.SPECULATIVE,
        decode_tokens=decode_tokens(records),
    )


def arm_acceptance(
    meta: WindowMeta, arm: Arm, records: list[RequestRecord]
) -> tuple[Acceptance, ArmRequestAcceptance | None]:
    """The arm's best acceptance (each request's figures when all carried them, else the
    counters' block) and its per-request block (None: no response carried figures)."""
    counters = window_acceptance(meta, arm, records)
    per_request = request_acceptance(
        records,
        counters,
        unfinished=meta.unfinished_requests,
        workers_lost=bool(meta.lost_workers),
    )
    return best_acceptance(counters, per_request), per_request


def read_window_meta(run_dir: Path, arm: Arm | str) -> WindowMeta:
    """window_<arm>.json of a run directory, typed (an arm that left none reads as such)."""
    return WindowMeta.read(Path(run_dir) / f"window_{arm}.json", str(arm))


def read_arm(run_dir: Path, arm: str) -> tuple[list[RequestRecord], WindowMeta]:
    path = run_dir / f"records_{arm}.jsonl"
    return (read_records(path) if path.is_file() else []), read_window_meta(run_dir, arm)


def summarize(run_dir: Path, *, length_buckets: Sequence[int] | None = None) -> RunSummary:
    """Compute the summary from the records and window files of a run directory and write
    it to summary.json. ``length_buckets``: new input-length bucket edges for a replayed
    trace (None: the run's own); the summary records the edges it used."""
    run_dir = Path(run_dir)
    run = read_run_info(run_dir)
    arms: dict[str, ArmSummary] = {}
    records_by_arm: dict[Arm, list[RequestRecord]] = {}
    warnings: list[str] = []
    metas: dict[str, WindowMeta] = {}
    server_deltas: dict[Arm, ArmServerDeltas] = {}
    for arm in Arm:
        records, meta = read_arm(run_dir, arm.value)
        metas[arm.value] = meta
        records_by_arm[arm] = records
        acceptance, per_request = arm_acceptance(meta, arm, records)
        server, server_deltas[arm] = arm_server_latency(scrape_windows(meta), records)
        arms[arm.value] = _arm_summary(
            run, arm.value, records, meta, acceptance, server, per_request
        )
        warnings += _arm_warnings(
            arm.value, arms[arm.value], run.request.max_tokens, skew_warning_ms(run)
        )
    tiered_records: list[RequestRecord] = []
    if run.tiered is not None:
        tiered_records, meta = read_arm(run_dir, TIERED_ARM)
        arms[TIERED_ARM] = _arm_summary(run, TIERED_ARM, tiered_records, meta, TIERED_ACCEPTANCE)
        warnings += _arm_warnings(
            TIERED_ARM, arms[TIERED_ARM], run.request.max_tokens, skew_warning_ms(run)
        )
    lossless = lossless_check(
        records_by_arm[Arm.BASELINE], records_by_arm[Arm.SPECULATIVE], run.request.temperature
    )
    if length_buckets is not None and run.analysis is not None and run.analysis.length_buckets:
        run.analysis.length_buckets = list(length_buckets)
    analysis = analyse(run.analysis, records_by_arm, arms, lossless)
    tiered = None
    if run.tiered is not None:
        tiered = tiered_comparison(
            run.tiered,
            records_by_arm[Arm.BASELINE],
            records_by_arm[Arm.SPECULATIVE],
            tiered_records,
            statistics=analysis.statistics,
            settings=run.analysis.statistics if run.analysis else StatisticsConfig(),
            temperature=run.request.temperature,
        )
        warnings += tiered_warnings(tiered)
        gateway = run_dir / GATEWAY_JSON
        if gateway.is_file():
            tiered.gateway = GatewayCost.model_validate_json(gateway.read_text())
    # The serving arms' timing: the tiered arm runs after them, alone.
    timing = arms_timing(
        run.arms_mode, metas, run.loadtest_config.get("alternating_block_requests")
    )
    warnings += timing_warnings(timing)
    warnings += analysis.bucket_flips
    settings = run.analysis.statistics if run.analysis else StatisticsConfig()
    server_speedup = compare_servers(
        server_deltas[Arm.BASELINE], server_deltas[Arm.SPECULATIVE], settings.confidence
    )
    source, source_reason = per_token_source(arms, server_speedup)
    summary = RunSummary(
        run=run,
        arms=arms,
        speedup=compare_arms(arms),
        lossless=lossless,
        warnings=warnings,
        statistics=analysis.statistics,
        cost=analysis.cost,
        verdict=analysis.verdict,
        verdict_by_bucket=analysis.verdict_by_bucket,
        bucket_flips=analysis.bucket_flips,
        floors=analysis.floors,
        arms_timing=timing,
        tiered=tiered,
        server_speedup=server_speedup,
        per_token_source=source,
        per_token_source_reason=source_reason,
    )
    write_summary(summary, run_dir)
    return summary


def per_token_source(
    arms: dict[str, ArmSummary], server: ServerComparison | None
) -> tuple[LatencySource, str | None]:
    """The client stream while both serving arms' chunks arrive smoothly; the servers'
    histograms when an arm's chunks arrived in bursts and both arms have them (else the
    client stream, whose TTFT and TPOT the headline then leaves out)."""
    bursty = [
        f"{arm.value} ({fraction:.0%} of chunk gaps under {BURST_GAP_S * 1000:.1f} ms)"
        for arm in Arm
        if bursting(arms[arm.value].overall)
        and (fraction := arms[arm.value].overall.burst_gap_fraction) is not None
    ]
    if not bursty:
        return LatencySource.CLIENT_STREAM, None
    where = f"chunks arrived in bursts on {', '.join(bursty)}"
    tpot = server.overall.get("tpot_ms", {}).get("mean") if server else None
    if tpot is not None and tpot.estimate is not None:
        return LatencySource.SERVER_HISTOGRAMS, (
            f"{where}: the client stream times their grouping, the servers' histograms "
            "time generation (engine step timestamps)"
        )
    return LatencySource.CLIENT_STREAM, (
        f"{where}, and the servers' latency histograms are not available on both arms "
        "(the report's per-token section says why)"
    )


def write_summary(summary: RunSummary, run_dir: Path) -> Path:
    path = run_dir / SUMMARY_JSON
    path.write_text(summary.model_dump_json(indent=1))
    return path


def previous_cloudwatch(run_dir: Path) -> CloudWatchResult | None:
    """The CloudWatch outcome recorded in an existing summary.json (any schema version up to
    this one), so rebuilding a report does not forget that the run was published."""
    path = run_dir / SUMMARY_JSON
    if not path.is_file():
        return None
    previous = json.loads(path.read_text())
    version = previous.get("schema_version")
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise ValueError(
            f"{path} has schema_version {version!r}, newer than this load test's "
            f"{SCHEMA_VERSION}: rebuild the report with the version that wrote it"
        )
    block = previous.get("cloudwatch")
    # Versions 1 and 2 store the same CloudWatch block.
    return None if block is None else CloudWatchResult.model_validate(block)
