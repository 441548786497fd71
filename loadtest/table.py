"""The side-by-side summary table (plain text for the terminal, Markdown for the report)."""

from __future__ import annotations

from typing import Any

# (label, path into an arm block, speedup path or None, format)
ROWS: list[tuple[str, tuple[str, ...], tuple[str, ...] | None, str]] = [
    ("requests ok / sent", ("overall", "succeeded"), None, "count"),
    ("TTFT p50 (ms)", ("overall", "ttft_ms", "p50"), ("ttft_ms", "p50"), "{:.1f}"),
    ("TTFT p99 (ms)", ("overall", "ttft_ms", "p99"), ("ttft_ms", "p99"), "{:.1f}"),
    ("TPOT mean (ms)", ("overall", "tpot_ms", "mean"), ("tpot_ms", "mean"), "{:.2f}"),
    ("ITL per token mean (ms)", ("overall", "itl_ms", "mean"), ("itl_ms", "mean"), "{:.2f}"),
    ("ITL per token p50 (ms)", ("overall", "itl_ms", "p50"), ("itl_ms", "p50"), "{:.2f}"),
    ("ITL per token p99 (ms)", ("overall", "itl_ms", "p99"), ("itl_ms", "p99"), "{:.2f}"),
    ("chunk gap p50 (ms)", ("overall", "chunk_gap_ms", "p50"), ("chunk_gap_ms", "p50"), "{:.2f}"),
    ("tokens per chunk mean", ("overall", "tokens_per_chunk", "mean"), None, "{:.2f}"),
    ("E2E p50 (ms)", ("overall", "e2e_ms", "p50"), ("e2e_ms", "p50"), "{:.0f}"),
    ("E2E p99 (ms)", ("overall", "e2e_ms", "p99"), ("e2e_ms", "p99"), "{:.0f}"),
    (
        "output tok/s per request",
        ("overall", "output_tokens_per_s", "mean"),
        ("output_tokens_per_s", "mean"),
        "{:.1f}",
    ),
    (
        "output tok/s (run)",
        ("overall", "output_throughput_tok_s"),
        ("output_throughput_tok_s",),
        "{:.1f}",
    ),
    ("requests/s", ("overall", "request_throughput_rps"), ("request_throughput_rps",), "{:.3f}"),
    ("goodput (req/s in SLO)", ("overall", "goodput_rps"), ("goodput_rps",), "{:.3f}"),
    ("failed requests", ("overall", "failed"), None, "{}"),
    ("length mismatches", ("overall", "length_mismatches"), None, "{}"),
    ("acceptance rate", ("acceptance", "acceptance_rate"), None, "{:.3f}"),
    ("mean acceptance length", ("acceptance", "mean_acceptance_length"), None, "{:.2f}"),
]
NOT_AVAILABLE = "n/a"


def _get(block: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(block, dict) or key not in block:
            return None
        block = block[key]
    return block


def _fmt(value: Any, fmt: str) -> str:
    if value is None:
        return NOT_AVAILABLE
    return fmt.format(value)


def summary_rows(data: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    arms = data["arms"]
    base, sd = arms["baseline"], arms["speculative"]
    header = ["metric", base["label"], sd["label"], "speedup (SD vs base)"]
    rows = []
    for label, path, speedup_path, fmt in ROWS:
        if fmt == "count":
            cells = [
                f"{a['overall']['succeeded']} / {a['overall']['requests']}" for a in (base, sd)
            ]
        else:
            cells = [_fmt(_get(a, path), fmt) for a in (base, sd)]
        speedup = (
            _get(data.get("speedup", {}).get("overall", {}), speedup_path) if speedup_path else None
        )
        rows.append([label, *cells, f"{speedup:.2f}x" if speedup is not None else ""])
    lossless = data.get("lossless", {})
    rate = lossless.get("exact_match_rate")
    rows.append(
        [
            "lossless exact-match rate",
            "",
            ""
            if rate is None
            else f"{rate:.0%} ({lossless['exact_matches']}/{lossless['prompts_compared']})",
            "",
        ]
    )
    reasons = sorted({reason for a in (base, sd) for reason in a["overall"]["failures_by_reason"]})
    for reason in reasons:
        counts = [str(a["overall"]["failures_by_reason"].get(reason, 0)) for a in (base, sd)]
        rows.append([f"  failed: {reason}", *counts, ""])
    return header, rows


def render_summary_table(summary: Any) -> str:
    """A fixed-width text table of both arms and the speedups (accepts Summary or its dict)."""
    data = summary.data if hasattr(summary, "data") else summary
    header, rows = summary_rows(data)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(
            cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(r)
        )
        for r in [header, *rows]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += [
        "| " + " | ".join(cell.strip().replace("|", "\\|") or " " for cell in row) + " |"
        for row in rows
    ]
    return "\n".join(lines)
