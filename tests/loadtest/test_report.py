"""Summary, CSV, Markdown/HTML report and PNG plots from a run directory."""

from __future__ import annotations

import base64
import csv
import json
import struct
from html.parser import HTMLParser

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
    assert "http_5xx" in html
    embedded = _Outline.of(html).images
    assert [alt for alt, _ in embedded] == [
        "latency_over_time.png",
        "per_class.png",
        "latency_cdfs.png",
        "acceptance_per_position.png",
    ]
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


class _Outline(HTMLParser):
    """report.html as a reader meets it: sections, headings, tables and images in order."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, str]] = []  # (kind, detail) in document order
        self.images: list[tuple[str, bytes]] = []  # (alt, decoded PNG)
        self.links: list[str] = []  # every src/href
        self.folded = 0  # depth of <details>
        self._heading: list[str] | None = None

    @classmethod
    def of(cls, page: str) -> _Outline:
        outline = cls()
        outline.feed(page)
        return outline

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        self.links += [values[k] for k in ("src", "href") if k in values]
        if tag == "details":
            self.folded += 1
        elif tag == "section":
            self.events.append(("section", values.get("id", "")))
        elif tag == "table":
            self.events.append(("table", "folded" if self.folded else "open"))
        elif tag == "img":
            src = values["src"]
            prefix = "data:image/png;base64,"
            assert src.startswith(prefix), src[:40]
            self.images.append((values["alt"], base64.b64decode(src[len(prefix) :])))
            self.events.append(("img", values["alt"]))
        elif tag == "h2":
            self._heading = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "details":
            self.folded -= 1
        elif tag == "h2" and self._heading is not None:
            state = "folded" if self.folded else "open"
            self.events.append(("h2", f"{state}:{''.join(self._heading)}"))
            self._heading = None

    def handle_data(self, data: str) -> None:
        if self._heading is not None:
            self._heading.append(data)


def test_report_html_reads_top_down_and_stands_alone(fake_run_dir) -> None:
    """Verdict, then the latency-over-time plot before any other table, then the class table;
    the long tables folded; every image embedded, nothing linked beside the file."""
    from experiment import build_config
    from loadtest.analysis import analysis_info

    run_file = fake_run_dir / "run.json"
    run = json.loads(run_file.read_text())
    run["analysis"] = analysis_info(build_config({})).model_dump(mode="json")
    run_file.write_text(json.dumps(run))
    paths = write_report(summarize(fake_run_dir), fake_run_dir)
    outline = _Outline.of(paths["html"].read_text())
    events = outline.events

    assert events[0] == ("section", "verdict-use-speculative-decoding")
    assert events[2] == ("table", "open")  # the verdict table, after its heading
    first_image = events.index(("img", "latency_over_time.png"))
    tables_before = [e for e in events[:first_image] if e[0] == "table"]
    assert tables_before == [("table", "open")], "a table slipped between verdict and plots"
    headings = [detail for kind, detail in events if kind == "h2"]
    assert headings[:3] == [
        "open:Verdict: use speculative decoding?",
        "open:Latency by prompt class, over the run",
        "open:Per prompt class",
    ]
    folded = [h for h in headings if h.startswith("folded:")]
    assert any("Confidence intervals" in h for h in folded)
    assert any("All statistics" in h for h in folded)
    assert all(not h.startswith("open:") for h in headings[headings.index(folded[0]) :])

    # Self-contained: the images are real PNGs inside the page, no src/href to a file.
    assert outline.images and all(data[:8] == PNG_MAGIC for _, data in outline.images)
    assert all(link.startswith("data:") for link in outline.links), outline.links

    markdown = paths["markdown"].read_text()
    order = [line for line in markdown.splitlines() if line.startswith(("## ", "!["))]
    assert order[:4] == [
        "## Verdict: use speculative decoding?",
        "## Latency by prompt class, over the run",
        "![latency_over_time.png](latency_over_time.png)",
        "![per_class.png](per_class.png)",
    ]
    assert "<details><summary>Confidence intervals" in markdown
