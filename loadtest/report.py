"""The report of a run: summary.csv, report.md, report.html and PNG plots (both arms on each).

Everything is rebuilt from the run directory (records + summary), so
``python -m loadtest report RUN_DIR`` reproduces it without rerunning the load.
"""

from __future__ import annotations

import csv
import html
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless: no display in containers or CI
import matplotlib.pyplot as plt
import numpy as np

from experiment.config import Arm
from loadtest.metrics import (
    DISTRIBUTIONS,
    PERCENTILES,
    RATES,
    per_token_itl_s,
    tpot_s,
)
from loadtest.records import RequestRecord, read_records
from loadtest.runner import Summary
from loadtest.table import markdown_table, summary_rows

COLORS = {"baseline": "#1f77b4", "speculative": "#d62728"}
STATS = ("mean", *(f"p{p}" for p in PERCENTILES))
CDF_PLOT = "latency_cdfs.png"
CLASS_PLOT = "per_class.png"
ACCEPTANCE_PLOT = "acceptance_per_position.png"


def _records(run_dir: Path, arm: str) -> list[RequestRecord]:
    path = run_dir / f"records_{arm}.jsonl"
    records = read_records(path) if path.is_file() else []
    return [r for r in records if not r.warmup and r.ok]


def write_csv(data: dict[str, Any], path: Path) -> None:
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["arm", "variant", "prompt_class", "metric", "stat", "value"])
        for arm, block in data["arms"].items():
            scopes = {"all": block["overall"], **block["by_class"]}
            for scope, metrics in scopes.items():
                for name in DISTRIBUTIONS:
                    for stat in ("count", *STATS):
                        writer.writerow(
                            [arm, block["label"], scope, name, stat, metrics[name][stat]]
                        )
                for name in (
                    *RATES,
                    "requests",
                    "succeeded",
                    "failed",
                    "length_mismatches",
                    "slo_attainment",
                ):
                    writer.writerow([arm, block["label"], scope, name, "value", metrics[name]])
                for reason, count in metrics["failures_by_reason"].items():
                    writer.writerow(
                        [arm, block["label"], scope, f"failed_{reason}", "count", count]
                    )
            acceptance = block["acceptance"]
            for name in ("acceptance_rate", "mean_acceptance_length"):
                writer.writerow([arm, block["label"], "all", name, "value", acceptance[name]])


def _cdf(axis: Any, values: list[float], label: str, color: str) -> None:
    if not values:
        return
    ordered = np.sort(np.asarray(values))
    axis.step(
        ordered,
        np.arange(1, ordered.size + 1) / ordered.size,
        where="post",
        label=f"{label} (n={ordered.size})",
        color=color,
    )


def plot_cdfs(data: dict[str, Any], run_dir: Path, path: Path) -> None:
    panels = [
        ("TTFT (ms)", lambda r: [r.ttft_s * 1000] if r.ttft_s is not None else []),
        ("inter-token latency per token (ms)", lambda r: [v * 1000 for v in per_token_itl_s(r)]),
        ("TPOT (ms)", lambda r: [t * 1000] if (t := tpot_s(r)) is not None else []),
        ("end-to-end latency (ms)", lambda r: [(r.e2e_s or 0.0) * 1000]),
    ]
    figure, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    for axis, (title, extract) in zip(axes.flat, panels, strict=True):
        for arm in Arm:
            values = [v for r in _records(run_dir, arm.value) for v in extract(r)]
            _cdf(axis, values, data["arms"][arm.value]["label"], COLORS[arm.value])
        axis.set_title(title)
        axis.set_ylabel("fraction of samples")
        axis.set_ylim(0, 1.02)
        axis.grid(alpha=0.3)
        if axis.lines:
            axis.legend(loc="lower right", fontsize=8)
        else:
            axis.text(0.5, 0.5, "no data", ha="center", va="center", transform=axis.transAxes)
    figure.suptitle("Latency CDFs, both arms (measured requests only)")
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def plot_per_class(data: dict[str, Any], path: Path) -> None:
    panels = [
        ("TTFT p50 (ms)", "ttft_ms", "p50"),
        ("ITL per token mean (ms)", "itl_ms", "mean"),
        ("E2E p50 (ms)", "e2e_ms", "p50"),
        ("output tokens/s per request (mean)", "output_tokens_per_s", "mean"),
    ]
    classes = sorted({c for arm in data["arms"].values() for c in arm["by_class"]})
    figure, axes = plt.subplots(1, len(panels), figsize=(14, 4))
    positions = np.arange(max(len(classes), 1))
    width = 0.38
    for axis, (title, metric, stat) in zip(axes, panels, strict=True):
        for offset, arm in zip((-width / 2, width / 2), Arm, strict=True):
            block = data["arms"][arm.value]
            values = [block["by_class"].get(c, {}).get(metric, {}).get(stat) for c in classes]
            axis.bar(
                positions + offset,
                [v or 0.0 for v in values],
                width,
                label=block["label"],
                color=COLORS[arm.value],
            )
        axis.set_xticks(positions, classes or ["(none)"], rotation=15)
        axis.set_title(title, fontsize=10)
        axis.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=8)
    figure.suptitle("Per prompt class, both arms")
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def plot_acceptance(data: dict[str, Any], path: Path) -> bool:
    acceptance = data["arms"]["speculative"]["acceptance"]
    rates = acceptance.get("per_position_rate")
    if not rates:
        return False
    figure, axis = plt.subplots(figsize=(7, 3.5))
    axis.bar(range(len(rates)), rates, color=COLORS["speculative"])
    axis.set_xlabel("draft position")
    axis.set_ylabel("accepted / drafts")
    axis.set_ylim(0, 1.05)
    axis.set_title(
        f"Acceptance per position (rate {acceptance['acceptance_rate']:.2f}, "
        f"mean length {acceptance['mean_acceptance_length']:.2f})"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return True


def _class_rows(data: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = [
        "class",
        "arm",
        "ok/sent",
        "TTFT p50",
        "TTFT p99",
        "TPOT mean",
        "ITL mean",
        "ITL p99",
        "chunk gap p50",
        "E2E p50",
        "E2E p99",
        "tok/s/req",
        "failed",
        "speedup E2E mean",
    ]
    rows = []
    for arm_name, arm in data["arms"].items():
        for cls, block in arm["by_class"].items():
            speed = data.get("speedup", {}).get("by_class", {}).get(cls, {}).get("e2e_ms", {})

            def f(metric: str, stat: str, fmt: str = "{:.1f}", b: dict[str, Any] = block) -> str:
                value = b[metric][stat]
                return "n/a" if value is None else fmt.format(value)

            rows.append(
                [
                    cls,
                    arm["label"],
                    f"{block['succeeded']}/{block['requests']}",
                    f("ttft_ms", "p50"),
                    f("ttft_ms", "p99"),
                    f("tpot_ms", "mean", "{:.2f}"),
                    f("itl_ms", "mean", "{:.2f}"),
                    f("itl_ms", "p99", "{:.2f}"),
                    f("chunk_gap_ms", "p50", "{:.2f}"),
                    f("e2e_ms", "p50", "{:.0f}"),
                    f("e2e_ms", "p99", "{:.0f}"),
                    f("output_tokens_per_s", "mean"),
                    str(block["failed"]),
                    ""
                    if arm_name == "baseline" or speed.get("mean") is None
                    else f"{speed['mean']:.2f}x",
                ]
            )
    return header, rows


def _distribution_rows(data: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["metric", "arm", "count", *STATS, "max"]
    rows = []
    for name in DISTRIBUTIONS:
        for arm in data["arms"].values():
            stats = arm["overall"][name]
            rows.append(
                [
                    f"{name}",
                    arm["label"],
                    str(stats["count"]),
                    *(
                        "n/a" if stats[key] is None else f"{stats[key]:.2f}"
                        for key in (*STATS, "max")
                    ),
                ]
            )
    return header, rows


def _failure_rows(data: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["arm", "reason", "count"]
    rows = [
        [arm["label"], reason, str(count)]
        for arm in data["arms"].values()
        for reason, count in arm["overall"]["failures_by_reason"].items()
    ]
    return header, rows


def _acceptance_rows(data: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["arm", "acceptance rate", "mean acceptance length", "per position", "note"]
    rows = []
    for arm in data["arms"].values():
        acc = arm["acceptance"]
        if acc["available"]:
            rows.append(
                [
                    arm["label"],
                    f"{acc['acceptance_rate']:.3f}",
                    f"{acc['mean_acceptance_length']:.2f}",
                    ", ".join(f"{v:.2f}" for v in acc["per_position_rate"] or []),
                    "",
                ]
            )
        else:
            rows.append([arm["label"], "not available", "not available", "", acc.get("reason", "")])
    return header, rows


def _lossless_rows(data: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["prompt", "class", "first differing token", "baseline", "SD"]
    rows = [
        [
            m["prompt_id"],
            m["prompt_class"],
            str(m["first_diff_token"]),
            repr(m["baseline_context"]),
            repr(m["speculative_context"]),
        ]
        for m in data["lossless"]["mismatches"]
    ]
    return header, rows


def _sections(data: dict[str, Any], plots: list[str]) -> list[tuple[str, Any]]:
    run = data["run"]
    lossless = data["lossless"]
    rate = lossless["exact_match_rate"]
    shape = run["load_shape"]
    load = (
        f"open loop at {shape['request_rate']} req/s (<= {shape['concurrency']} in flight)"
        if shape["request_rate"]
        else f"closed loop at concurrency {shape['concurrency']}"
    )
    intro = (
        f"Model `{run['model']}`, {run['measured_requests']} measured requests per arm "
        f"(+{run['warmup_requests']} warm-up, excluded), {load}, max_tokens "
        f"{run['request']['max_tokens']}, temperature {run['request']['temperature']}, "
        f"ignore_eos {run['request']['ignore_eos']}, seed {run['seed']}, API "
        f"`{run['request']['api']}`. Started {run['started_at']}. Speedup > 1 means SD is "
        "better (latency: base/SD; throughput: SD/base)."
    )
    lossless_text = (
        "not computable (no prompt succeeded on both arms)"
        if rate is None
        else f"exact-match rate {rate:.0%} ({lossless['exact_matches']}/"
        f"{lossless['prompts_compared']} prompts)"
    )
    if lossless["baseline_self_consistency"] is not None:
        lossless_text += (
            f"; the baseline agrees with itself on "
            f"{lossless['baseline_self_consistency']:.0%} of repeated prompts"
        )
    if lossless.get("note"):
        lossless_text += f" ({lossless['note']})"
    sections: list[tuple[str, Any]] = [
        ("Run", intro),
        ("Both arms", summary_rows(data)),
        ("Per prompt class", _class_rows(data)),
        ("All statistics (overall; ms, tok/s, tokens per chunk)", _distribution_rows(data)),
        ("Speculative acceptance (server /metrics deltas)", _acceptance_rows(data)),
        ("Lossless check", lossless_text),
    ]
    if lossless["mismatches"]:
        sections.append(("Lossless mismatches", _lossless_rows(data)))
    failures = _failure_rows(data)
    sections.append(("Failures by reason", failures if failures[1] else "No failed requests."))
    for arm in data["arms"].values():
        if arm["length_mismatch_examples"]:
            sections.append(
                (
                    f"Output-length mismatches ({arm['label']})",
                    (
                        ["request", "prompt", "requested", "got"],
                        [
                            [str(m["index"]), m["prompt_id"], str(m["requested"]), str(m["got"])]
                            for m in arm["length_mismatch_examples"]
                        ],
                    ),
                )
            )
    if data["warnings"]:
        sections.append(("Warnings", "\n".join(f"- {w}" for w in data["warnings"])))
    sections.append(("Plots", plots))
    return sections


def render_markdown(data: dict[str, Any], plots: list[str]) -> str:
    parts = ["# Speculative decoding load test: baseline vs SD"]
    for title, body in _sections(data, plots):
        parts.append(f"## {title}")
        if isinstance(body, tuple):
            parts.append(markdown_table(*body))
        elif isinstance(body, list):
            parts.extend(f"![{name}]({name})" for name in body)
        else:
            parts.append(body)
    return "\n\n".join(parts) + "\n"


def render_html(data: dict[str, Any], plots: list[str]) -> str:
    out = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        "<title>Speculative decoding load test</title><style>",
        "body{font-family:sans-serif;max-width:1200px;margin:auto}"
        "table{border-collapse:collapse;margin:8px 0}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
        "td:first-child,th:first-child{text-align:left}",
        "</style></head><body><h1>Speculative decoding load test: baseline vs SD</h1>",
    ]
    for title, body in _sections(data, plots):
        out.append(f"<h2>{html.escape(title)}</h2>")
        if isinstance(body, tuple):
            header, rows = body
            out.append(
                "<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>"
            )
            out += [
                "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                for row in rows
            ]
            out.append("</table>")
        elif isinstance(body, list):
            out += [
                f"<p><img src='{html.escape(name)}' alt='{html.escape(name)}'></p>" for name in body
            ]
        else:
            out.append("<p>" + html.escape(body).replace("\n", "<br>") + "</p>")
    out.append("</body></html>")
    return "\n".join(out)


def write_report(summary: Summary) -> dict[str, Path]:
    """Write summary.csv, the plots, report.md and report.html into the run directory."""
    run_dir = summary.run_dir
    data = summary.data
    paths = {
        "csv": run_dir / "summary.csv",
        "markdown": run_dir / "report.md",
        "html": run_dir / "report.html",
        "cdf_plot": run_dir / CDF_PLOT,
        "class_plot": run_dir / CLASS_PLOT,
    }
    write_csv(data, paths["csv"])
    plot_cdfs(data, run_dir, paths["cdf_plot"])
    plot_per_class(data, paths["class_plot"])
    plots = [CDF_PLOT, CLASS_PLOT]
    if plot_acceptance(data, run_dir / ACCEPTANCE_PLOT):
        plots.append(ACCEPTANCE_PLOT)
        paths["acceptance_plot"] = run_dir / ACCEPTANCE_PLOT
    paths["markdown"].write_text(render_markdown(data, plots))
    paths["html"].write_text(render_html(data, plots))
    return paths
