"""The report's per-token latency by source: the client stream next to the arms' own vLLM
histograms (loadtest/server_latency.py), with the source the headline uses named.

Shared by the Markdown and HTML renderers like ``tables``. Missing values read ``n/a``.
"""

from __future__ import annotations

from experiment.config import Arm
from loadtest.metrics import ALL_CLASSES
from loadtest.render.decision import NOT_AVAILABLE, Table, interval_text
from loadtest.results import (
    ArmServerLatency,
    HistogramDistribution,
    Interval,
    LatencySource,
    MetricBlock,
    RunSummary,
    ServerLatency,
)

CLIENT = LatencySource.CLIENT_STREAM.value
SERVER = LatencySource.SERVER_HISTOGRAMS.value
# (label, client metric and stat, server metric and stat); None: that source has no such
# figure. The server's inter-token latency histogram is per engine step, so it stands next to
# the client's chunk gap; its per-token mean next to the client's per-token ITL.
ROWS: list[tuple[str, tuple[str, str] | None, tuple[str, str] | None]] = [
    ("TTFT mean (ms)", ("ttft_ms", "mean"), ("ttft_ms", "mean")),
    ("TTFT p50 (ms)", ("ttft_ms", "p50"), ("ttft_ms", "p50")),
    ("TPOT mean (ms)", ("tpot_ms", "mean"), ("tpot_ms", "mean")),
    ("TPOT p50 (ms)", ("tpot_ms", "p50"), ("tpot_ms", "p50")),
    ("TPOT p90 (ms)", ("tpot_ms", "p90"), ("tpot_ms", "p90")),
    ("TPOT p99 (ms)", ("tpot_ms", "p99"), ("tpot_ms", "p99")),
    ("ITL per token mean (ms)", ("itl_ms", "mean"), ("itl_ms", "mean")),
    ("step gap / chunk gap mean (ms)", ("chunk_gap_ms", "mean"), ("step_gap_ms", "mean")),
    ("step gap / chunk gap p50 (ms)", ("chunk_gap_ms", "p50"), ("step_gap_ms", "p50")),
]


def _server_value(block: ServerLatency | None, metric: str, stat: str) -> str:
    if block is None:
        return NOT_AVAILABLE
    if metric == "itl_ms":
        value = block.itl_ms_mean
        return NOT_AVAILABLE if value is None else f"{value:.2f}"
    found = getattr(block, metric)
    if not isinstance(found, HistogramDistribution):
        return NOT_AVAILABLE
    if stat == "mean":
        return NOT_AVAILABLE if found.mean is None else f"{found.mean:.2f}"
    quantile = found.quantiles.get(stat)
    if quantile is None:
        return NOT_AVAILABLE
    high = "inf" if quantile.bucket_high is None else f"{quantile.bucket_high:g}"
    return f"{quantile.value:.2f} (bucket {quantile.bucket_low:g}-{high})"


def _client_value(block: MetricBlock | None, metric: str, stat: str) -> str:
    if block is None:
        return NOT_AVAILABLE
    value = block.distribution(metric).stat(stat)
    return NOT_AVAILABLE if value is None else f"{value:.2f}"


def _client_speedup(summary: RunSummary, scope: str, metric: str, stat: str) -> str:
    statistics = summary.statistics
    if statistics is not None:
        stats = statistics.overall if scope == ALL_CLASSES else statistics.by_class.get(scope)
        interval = stats.speedup.get(metric, {}).get(stat) if stats else None
        if interval is not None:
            return interval_text(interval)
    by_class = summary.speedup.by_class
    speedups = summary.speedup.overall if scope == ALL_CLASSES else by_class.get(scope)
    value = speedups.value(metric, stat) if speedups else None
    return NOT_AVAILABLE if value is None else f"{value:.3f}x"


def _server_speedup(summary: RunSummary, scope: str, metric: str, stat: str) -> str:
    server = summary.server_speedup
    if server is None:
        return NOT_AVAILABLE
    stats = server.overall if scope == ALL_CLASSES else server.by_class.get(scope, {})
    interval: Interval | None = stats.get(metric, {}).get(stat)
    return interval_text(interval)


def per_token_rows(summary: RunSummary) -> Table:
    """Per scope (all, then each class with a server figure) and metric: both arms and the
    speedup from each source, the source the headline uses marked."""
    base, sd = summary.arm(Arm.BASELINE), summary.arm(Arm.SPECULATIVE)
    header = ["scope", "metric", "source", base.label, sd.label, "speedup (SD vs base)"]
    used = summary.per_token_source.value
    scopes = [ALL_CLASSES]
    for arm in (base, sd):
        latency = arm.server_latency
        scopes += [c for c in (latency.by_class if latency else {}) if c not in scopes]
    rows = []
    for scope in scopes:
        client_blocks = [
            a.overall if scope == ALL_CLASSES else a.by_class.get(scope) for a in (base, sd)
        ]
        server_blocks = [_server_block(a.server_latency, scope) for a in (base, sd)]
        for label, client, server in ROWS:
            if client is not None:
                values = [_client_value(b, *client) for b in client_blocks]
                speedup = _client_speedup(summary, scope, *client)
                rows.append([scope, label, _marked(CLIENT, used, label), *values, speedup])
            if server is not None:
                values = [_server_value(b, *server) for b in server_blocks]
                speedup = _server_speedup(summary, scope, *server)
                rows.append([scope, label, _marked(SERVER, used, label), *values, speedup])
    return header, rows


def _server_block(server: ArmServerLatency | None, scope: str) -> ServerLatency | None:
    if server is None or not server.available:
        return None
    return server.overall if scope == ALL_CLASSES else server.by_class.get(scope)


def _marked(source: str, used: str, label: str) -> str:
    """The source's name, starred where the headline takes its TTFT or TPOT mean from it."""
    headline = label.startswith(("TTFT mean", "TPOT mean"))
    return f"{source} *" if headline and source == used else source


def per_token_text(summary: RunSummary) -> str:
    """Which source the headline's TTFT and TPOT take and why, how the server's figures were
    read, and what is missing."""
    used = summary.per_token_source.value
    reason = summary.per_token_source_reason
    why = f", because {reason}." if reason else ": both arms' chunks arrived smoothly."
    lines = [f"Headline TTFT and TPOT (*): {used}{why}"]
    lines.append(
        "Server histograms: each arm's own vLLM histograms over its measured window "
        "(vllm:time_to_first_token_seconds, vllm:request_time_per_output_token_seconds, "
        "vllm:inter_token_latency_seconds), stamped by the engine core's steps; mean = "
        "change of sum / change of count (exact); quantiles interpolated linearly inside "
        "their bucket (Prometheus histogram_quantile), shown with the bucket: that is their "
        "resolution. The step gap is per engine step (several tokens on SD), the ITL per "
        "token mean is the step gaps' sum over decode tokens."
    )
    if summary.server_speedup is not None:
        lines.append(f"Server speedup intervals: {summary.server_speedup.interval_method}.")
    for arm in (Arm.BASELINE, Arm.SPECULATIVE):
        server = summary.arm(arm).server_latency
        if server is None:
            lines.append(f"{arm.value}: no server histograms recorded (a run before schema 12).")
        elif not server.available:
            lines.append(f"{arm.value}: server histograms not available: {server.reason}.")
        elif server.class_note:
            lines.append(f"{arm.value}: {server.class_note}.")
    return "\n".join(lines)


def has_server_latency(summary: RunSummary) -> bool:
    """Whether any serving arm recorded server histograms (the section is worth showing)."""
    return any(summary.arm(arm).server_latency is not None for arm in Arm)
