"""Summary, CSV, Markdown/HTML report and PNG plots from a run directory."""

from __future__ import annotations

import csv
import json
import struct

from loadtest.render.console import render_summary_table
from loadtest.report import write_report
from loadtest.results import SCHEMA_VERSION
from loadtest.summary import summarize

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    return struct.unpack(">II", data[16:24])


def test_summary_has_every_section(fake_run_dir) -> None:
    summary = summarize(fake_run_dir)
    data = json.loads((fake_run_dir / "summary.json").read_text())
    assert data == json.loads(summary.model_dump_json())
    assert data["schema_version"] == SCHEMA_VERSION
    for arm in ("baseline", "speculative"):
        block = data["arms"][arm]
        assert block["overall"]["failures_by_reason"] == {
            "disconnected_mid_stream": 1,
            "http_5xx": 1,
        }
        assert set(block["by_class"]) == {"structured", "open_ended"}
        for metric in (
            "ttft_ms",
            "tpot_ms",
            "itl_ms",
            "chunk_gap_ms",
            "e2e_ms",
            "output_tokens_per_s",
        ):
            assert block["overall"][metric]["p99"] is not None
    assert data["arms"]["baseline"]["acceptance"]["available"] is False
    assert data["arms"]["baseline"]["acceptance"]["acceptance_rate"] is None
    assert data["arms"]["speculative"]["acceptance"]["acceptance_rate"] == 120 / 280
    assert data["lossless"]["exact_match_rate"] is not None
    assert summary.speedup_of("itl_ms", "mean") == data["speedup"]["overall"]["itl_ms"]["mean"]
    structured = data["speedup"]["by_class"]["structured"]["itl_ms"]["mean"]
    assert summary.speedup_of("itl_ms", "mean", prompt_class="structured") == structured
    assert structured is not None
    assert summary.speedup_of("goodput_rps") == data["speedup"]["overall"]["goodput_rps"]
    assert summary.speedup_of("itl_ms", prompt_class="no_such_class") is None


def test_report_files_and_plots(fake_run_dir) -> None:
    paths = write_report(summarize(fake_run_dir), fake_run_dir)
    plot_keys = ("cdf_plot", "class_plot", "timeseries_plot", "acceptance_plot")
    for key in ("csv", "markdown", "html", *plot_keys):
        assert paths[key].is_file() and paths[key].stat().st_size > 0, key
    for plot in plot_keys:
        width, height = _png_size(paths[plot])
        assert width > 400 and height > 200
    markdown = paths["markdown"].read_text()
    for text in (
        "TTFT p50",
        "ITL per token",
        "chunk gap",
        "TPOT",
        "E2E",
        "goodput",
        "acceptance rate",
        "lossless",
        "http_5xx",
        "disconnected_mid_stream",
        "speedup",
        "latency_cdfs.png",
        "per_class.png",
        "latency_over_time.png",
        "structured",
        "open_ended",
    ):
        assert text in markdown, text
    for stat in ("p90", "p95", "p99"):
        assert f"| {stat} " in markdown or f" {stat} |" in markdown, stat
    html = paths["html"].read_text()
    assert "<img src='latency_cdfs.png'" in html and "http_5xx" in html
    assert "<img src='latency_over_time.png'" in html
    rows = list(csv.DictReader(paths["csv"].open()))
    failed = [r for r in rows if r["metric"] == "failed_http_5xx" and r["prompt_class"] == "all"]
    assert [r["value"] for r in failed] == ["1", "1"]


def test_terminal_table_shows_both_arms_and_failures(fake_run_dir) -> None:
    table = render_summary_table(summarize(fake_run_dir))
    header = table.splitlines()[0]
    assert "Base" in header and "SD" in header and "speedup" in header
    assert "failed: http_5xx" in table and "mean acceptance length" in table
    assert "n/a" in table  # baseline acceptance: not available, never 0


def test_bursty_arrivals_and_a_busy_load_generator_are_warned_about(fake_run_dir) -> None:
    from loadtest.records import read_records, write_records

    path = fake_run_dir / "records_baseline.jsonl"
    records = read_records(path)
    for record in records:
        if record.chunk_times:
            record.chunk_times = [record.chunk_times[0]] * len(record.chunk_times)
    write_records(path, records)
    window = fake_run_dir / "window_baseline.json"
    meta = json.loads(window.read_text())
    window.write_text(json.dumps({**meta, "load_generator_cpu": 0.97}))
    summary = summarize(fake_run_dir)
    assert summary.arm("baseline").overall.burst_gap_fraction == 1.0
    assert summary.arm("baseline").load_generator_cpu == 0.97
    warnings = " ".join(summary.warnings)
    assert "arrived in bursts" in warnings and "used 97% of a core" in warnings
    assert "the load generator was busy" in warnings
    assert "arrived in bursts" not in " ".join(w for w in summary.warnings if "speculative" in w)
    # The same bursts with an idle client are the server's doing, and the warning says so.
    window.write_text(json.dumps({**meta, "load_generator_cpu": 0.12}))
    warnings = " ".join(summarize(fake_run_dir).warnings)
    assert "used only 12% of a core, so the server sent them together" in warnings
    assert "load generator may be the bottleneck" not in warnings


def test_run_header_says_what_the_servers_really_serve(fake_run_dir) -> None:
    """The local run serves generated miniatures under the target's name: the report's run
    header says so (issue 10 item 1); a run without the note names the model alone."""
    plain = write_report(summarize(fake_run_dir), fake_run_dir)
    assert "(served:" not in plain["markdown"].read_text()
    run_json = fake_run_dir / "run.json"
    run = json.loads(run_json.read_text())
    run["served_models"] = "generated miniature models, the target made heavy"
    run_json.write_text(json.dumps(run))
    paths = write_report(summarize(fake_run_dir), fake_run_dir)
    expected = "(served: generated miniature models, the target made heavy)"
    assert f"Model `{run['model']}` {expected}" in paths["markdown"].read_text()
    assert expected in paths["html"].read_text()
