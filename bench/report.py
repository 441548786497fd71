"""The Markdown results table (and the ratio table) from results.json, and README update."""

from __future__ import annotations

from pathlib import Path
from typing import Any

BEGIN = "<!-- RESULTS:BEGIN (written by python -m bench) -->"
END = "<!-- RESULTS:END -->"
REFERENCE = "vllm"
# Errors below 10 us are timestamp noise: ratios of two such values say nothing.
RATIO_FLOOR_MS = 0.01


def _pair(block: dict[str, Any]) -> str:
    p50, p99 = block.get("p50"), block.get("p99")
    if p50 is None or p99 is None:
        return "-"
    return f"{p50:.2f} / {p99:.2f}"


def _ratio(ours: float | None, reference: float | None) -> str:
    if ours is None or reference is None:
        return "-"
    return f"{max(abs(ours), RATIO_FLOOR_MS) / max(abs(reference), RATIO_FLOOR_MS):.2f}"


def _reported(result: dict[str, Any]) -> str:
    """What the instrument gave per request, measured from its output (bench/accuracy.py)."""
    shown = result.get("reported")
    if not shown or shown.get("chunk_times") is None:
        return "-"  # results from before the bench measured it
    tokens = "yes" if shown["chunk_tokens"] else "no"
    return f"{shown['chunk_times']:.0f} / {shown['itl_values']:.0f} / {tokens}"


def render_table(data: dict[str, Any]) -> str:
    lines = [
        "| streams | instrument | TTFT err p50 / p99 (ms) | per-token ITL err p50 / p99 (ms) "
        "| chunk-gap err p50 / p99 (ms) | E2E err p50 / p99 (ms) | token-count err "
        "| reports per request: chunk times / ITL values / tokens per chunk "
        "| achieved streams | tokens/s | client CPU (cores) | client CPU per chunk (µs) "
        "| failed |",
        "|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    by_level: dict[int, dict[str, dict[str, Any]]] = {}
    for result in data["results"]:
        by_level.setdefault(result["level"], {})[result["instrument"]] = result
        if "error" in result:
            lines.append(
                f"| {result['level']} | {result['label']} | run failed: "
                f"{result['error'][:80]} |||||||||||"
            )
            continue
        tokens = result["token_count"]
        token_cell = (
            f"{tokens['mismatched_requests']}/{tokens['requests_with_count']} off"
            if tokens["requests_with_count"]
            else "not reported"
        )
        cpu = result.get("client_cpu_cores")
        per_chunk = result.get("client_cpu_us_per_chunk")
        load = result["load"]
        lines.append(
            f"| {result['level']} | {result['label']} | {_pair(result['ttft_ms'])} "
            f"| {_pair(result['itl_token_ms'])} | {_pair(result['chunk_gap_ms'])} "
            f"| {_pair(result['e2e_ms'])} | {token_cell} | {_reported(result)} "
            f"| {load['achieved_streams']:.1f} "
            f"| {load['tokens_per_s']:.0f} | {'-' if cpu is None else f'{cpu:.2f}'} "
            f"| {'-' if per_chunk is None else f'{per_chunk:.0f}'} "
            f"| {result['failed'] + result['untagged']} |"
        )
    ratio_lines = [
        "",
        "Ratio |instrument's error| / |vllm bench serve error|, both floored at 0.01 ms (below 1: "
        "closer to the truth than vllm bench serve):",
        "",
        "| streams | instrument | TTFT p50 | TTFT p99 | per-token ITL p50 | per-token ITL p99 "
        "| chunk-gap p50 | chunk-gap p99 |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for level, results in by_level.items():
        reference = results.get(REFERENCE)
        if reference is None or "error" in reference:
            continue
        for key, result in results.items():
            if key == REFERENCE or "error" in result:
                continue
            cells = [
                _ratio(result[metric][stat], reference[metric][stat])
                for metric in ("ttft_ms", "itl_token_ms", "chunk_gap_ms")
                for stat in ("p50", "p99")
            ]
            ratio_lines.append(f"| {level} | {result['label']} | " + " | ".join(cells) + " |")
    machine = data["machine"]
    footer = [*_truth_lines(data["results"])]
    footer += [
        "",
        f"Run {data['started_at']} ({data['duration_s'] / 60:.1f} min, `{data['command']}`) on "
        f"{machine['cpus']} CPUs, load average (1 min) {data['loadavg_start'][0]:.2f} at start, "
        f"{data['loadavg_end'][0]:.2f} at end; locust {machine['locust']}, "
        f"vllm {machine['vllm']}"
        + (f", aiperf {machine['aiperf']}." if machine.get("aiperf") else "."),
    ]
    return "\n".join(lines + ratio_lines + footer)


def _truth_lines(results: list[dict[str, Any]]) -> list[str]:
    """Which clock the truth came from, and how late the server's own stamps would have been."""
    kernel = sum(r.get("truth_clock", {}).get("kernel", 0) for r in results)
    user = sum(r.get("truth_clock", {}).get("user", 0) for r in results)
    if not kernel + user:
        return []
    late = [
        (r["level"], r["truth_user_late_ms"]["p99"])
        for r in results
        if r.get("truth_user_late_ms", {}).get("p99") is not None
    ]
    worst = max(late, key=lambda item: item[1]) if late else None
    line = (
        f"Truth: the kernel's transmit timestamp for {kernel} of {kernel + user} matched "
        "requests (the rest: the server's stamp after its write)."
    )
    if worst is not None:
        line += (
            f" The server's own after-write stamps were late by up to {worst[1]:.1f} ms p99 "
            f"(at {worst[0]} streams): the error they would have put into the truth."
        )
    return ["", line]


def update_readme(path: Path, table: str) -> None:
    """Replace the text between the RESULTS markers of ``path`` with ``table``."""
    text = path.read_text() if path.is_file() else ""
    block = f"{BEGIN}\n{table}\n{END}"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        text = head + block + tail
    else:
        text = (text.rstrip() + "\n\n" if text else "") + block + "\n"
    path.write_text(text)
