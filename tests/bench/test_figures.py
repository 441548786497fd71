"""bench.figures: README.md and docs/*.md carry the figures of the checked-in records, and no
measured-looking figure stands outside a rendered region without a source."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from bench.figures import render_index, rendered, stale
from bench.figures.measure import (
    JUNIT_XML,
    MEASUREMENTS,
    MeasureError,
    Measurement,
    Outcome,
    local_run_figures,
    miniature_figures,
    run,
    suite_figures,
    tune_figures,
)
from bench.figures.records import (
    ROOT,
    BenchReported,
    FigureRecord,
    GuardrailsLifecycleFigures,
    LocalRunFigures,
    Provenance,
    StatsSpeedFigures,
    TestSuiteFigures,
    bench_record,
    load_records,
    write_record,
)
from bench.figures.regions import (
    REGIONS,
    RegionError,
    documents,
    regions,
    render_document,
    rendered_documents,
    span,
)
from bench.figures.scan import Quoted, check_reason, find_figures, read_quoted, unrendered
from loadtest.results import GatewayCost, HostExpectation, StepCosts
from loadtest.results import Interval as SummaryInterval

GOLDEN_SUMMARY = ROOT / "tests" / "loadtest" / "summary_characterization.json"


# --- the repository's own documents ------------------------------------------------------


def test_documents_match_a_fresh_render_of_the_records() -> None:
    assert stale() == [], "run: python -m bench.figures render"


def test_every_region_is_used_and_every_used_region_exists() -> None:
    used = {
        region.name for path in rendered_documents() for region in regions(path, path.read_text())
    }
    assert used == set(REGIONS)


def test_no_measured_figure_outside_a_region_without_a_source() -> None:
    hits = [hit for path in documents() for hit in find_figures(path, path.read_text())]
    missing, unused = unrendered(hits, read_quoted())
    assert [str(h) for h in missing] == [], (
        "render these from a record (bench/figures) or, if quoted, give their source in "
        "docs/records/quoted.md"
    )
    assert unused == [], "docs/records/quoted.md rows that match no figure: remove them"


def test_records_name_their_file_date_machine_and_command() -> None:
    records = load_records()
    assert {"make-local-fresh", "make-local", "make-test", "ci-run", "tune-sweep"} <= set(records)
    for name, record in records.items():
        assert record.name == name
        assert record.date[:4].isdigit() and record.machine.cores > 0 and record.command
        assert record.remeasure


def test_the_stats_speed_record_agrees_with_its_results_file() -> None:
    record = load_records()["stats-speed"]
    results = json.loads((ROOT / "bench" / "stats_speed.json").read_text())
    assert isinstance(record.figures, StatsSpeedFigures)
    assert record.figures.summarize_s == results["summarize_s"]
    assert record.figures.paired_statistics_s == results["paired_statistics_s"]


def test_the_tuning_figures_are_the_last_sweeps() -> None:
    # The README once said 3 of 8 held-out points were within 15% after the sweep had 8 of 8.
    text = (ROOT / "README.md").read_text()
    tune = load_records()["tune-sweep"].figures
    within = sum(p.within_tolerance for p in tune.held_out)  # type: ignore[union-attr]
    assert f"goal met for {within} of {len(tune.held_out)} held-out points" in text  # type: ignore[union-attr]


# --- rendering ------------------------------------------------------------------------------


def _records_with(name: str, **figures: object) -> dict[str, FigureRecord]:
    records = load_records()
    changed = records[name].figures.model_copy(update=figures)
    records[name] = records[name].model_copy(update={"figures": changed})
    return records


def test_a_changed_record_changes_the_rendered_documents() -> None:
    records = _records_with("make-test", wall_s=61.0, passed=7)
    fresh = rendered(records=records)
    readme = fresh[ROOT / "README.md"]
    assert "`make test` takes 1 min 1 s (7 tests passed" in readme
    assert readme != (ROOT / "README.md").read_text()


def test_the_readme_names_the_commit_each_test_suite_ran_on() -> None:
    # make test and .ci/run can be measured on different trees: their test counts then
    # differ, and the commits say why.
    records = load_records()
    records["ci-run"] = records["ci-run"].model_copy(
        update={"provenance": Provenance(kind="measured", commit="abc1234")}
    )
    readme = rendered(records=records)[ROOT / "README.md"]
    test_commit = records["make-test"].provenance.commit
    assert f"commit {test_commit}; " in readme
    assert "generates the models, " in readme and ", commit abc1234)" in readme


def test_regions_inline_and_block_keep_their_markers() -> None:
    doc = ROOT / "docs" / "x.md"  # never written: the path only places the links
    text = (
        "Before <!-- figures:readme-tune -->old<!-- /figures:readme-tune --> after.\n\n"
        "<!-- figures:stats-speed -->\nold\n<!-- /figures:stats-speed -->\n"
    )
    out = render_document(doc, text, load_records())
    assert out.startswith("Before <!-- figures:readme-tune -->held-out prediction errors ")
    assert "<!-- /figures:readme-tune --> after." in out
    assert "| the whole `summarize(run_dir)` | **5.0 s**" in out
    assert "old" not in out
    # links from the document to its records are relative to the document
    assert "[stats-speed](records/stats-speed.json)" in out
    assert render_document(doc, out, load_records()) == out  # idempotent


def test_an_unknown_region_or_a_missing_record_is_named() -> None:
    with pytest.raises(RegionError, match="unknown figures region 'nope'"):
        render_document(ROOT / "README.md", "<!-- figures:nope --><!-- /figures:nope -->", {})
    records = load_records()
    del records["tune-sweep"]
    with pytest.raises(RegionError, match=r"python -m bench\.figures measure tune-sweep"):
        render_document(
            ROOT / "README.md", "<!-- figures:readme-tune --><!-- /figures:readme-tune -->", records
        )


@pytest.mark.parametrize("region", ["local-tiered", "readme-tiered"])
def test_a_tiered_region_refuses_a_run_without_the_tiered_arm(region: str) -> None:
    records = _records_with("local-tiered", tiered=None)
    with pytest.raises(RegionError, match=r"no tiered arm: run with local\.tiered=true"):
        REGIONS[region](records)


def _tiered_with_gateway(cost: GatewayCost | None) -> dict[str, FigureRecord]:
    record = load_records()["local-tiered"].figures
    assert isinstance(record, LocalRunFigures) and record.tiered is not None
    return _records_with("local-tiered", tiered=record.tiered.model_copy(update={"gateway": cost}))


GATEWAY_COST = GatewayCost(
    requests=66,
    cpu_s=0.2,
    cpu_ms_per_request=3.03,
    downstream_mean_ms=812.4,
    upstream_mean_ms=811.9,
    added_ms_per_request=0.5,
    gateway_cores=[0, 1],
    server_cores={"baseline": [0], "speculative": [1]},
    machine_cores=[0, 1],
    cpu_binding="isolated",
)


def test_the_tiered_regions_state_the_gateways_cost_or_that_the_record_has_none() -> None:
    # Records measured before the gateway's cost was kept still render, saying so.
    bare = _tiered_with_gateway(None)
    assert "not measured in this record" in REGIONS["local-tiered"](bare)
    assert "the gateway's own cost not measured in this record" in REGIONS["readme-tiered"](bare)
    measured = _tiered_with_gateway(GATEWAY_COST)
    region = REGIONS["local-tiered"](measured)
    assert "The gateway cost during the tiered arm: 3.03 ms CPU per request" in region
    assert "added 0.50 ms per request" in region
    assert "shares a core with baseline and speculative (unavoidable here" in region
    assert (
        "the gateway itself took 3.03 ms CPU and added 0.50 ms per request, sharing a core "
        "with baseline and speculative (unavoidable on these cores)"
    ) in REGIONS["readme-tiered"](measured)


@pytest.mark.parametrize("region", ["local-eagle3", "readme-eagle3"])
def test_an_eagle3_region_refuses_a_run_of_another_drafter(region: str) -> None:
    records = _records_with("local-eagle3", drafter="draft-model")
    with pytest.raises(RegionError, match="was run with drafter 'draft-model'"):
        REGIONS[region](records)


def test_a_transcribed_record_must_name_its_commit() -> None:
    with pytest.raises(ValueError, match=r"provenance\.commit"):
        Provenance(kind="transcribed-from-commit")


def test_a_record_file_must_carry_its_own_name(tmp_path: Path) -> None:
    record = load_records()["make-test"]
    write_record(record.model_copy(update={"name": "other"}), tmp_path)
    (tmp_path / "other.json").rename(tmp_path / "make-test.json")
    with pytest.raises(ValueError, match="its name is 'other'"):
        load_records(tmp_path, root=tmp_path)


# --- the scan -----------------------------------------------------------------------------


def test_the_scan_finds_every_figure_with_a_unit_fenced_code_too(tmp_path: Path) -> None:
    doc = tmp_path / "README.md"
    text = "\n".join(
        [
            "It ran 3.20x faster [2.38, 4.09] in 7 min 0 s, ± 2.",
            "Configured: 12.5 ms and 40% there.",  # no word says "measured"
            "A setting `[2, 8]` and `1.5x` in code.",
            "```",
            "make local   # 9.9x (~11 min)",
            "```",
            "<!-- figures:a -->4.4x<!-- /figures:a -->",
            "trn2.48xlarge is no speedup; 66 GB at $0.10, 15-16 GB/s, 349 tokens/s, 1.18-1.55 s",
        ]
    )
    hits = find_figures(doc, text, root=tmp_path)
    assert [(h.line, h.figure) for h in hits] == [
        (1, "3.20x"),
        (1, "[2.38, 4.09]"),
        (1, "7 min 0 s"),
        (1, "±"),
        (2, "12.5 ms"),
        (2, "40%"),
        (5, "9.9x"),
        (5, "11 min"),
        (8, "66 GB"),
        (8, "$0.10"),
        (8, "15-16 GB/s"),
        (8, "349 tokens/s"),
        (8, "1.18-1.55 s"),
    ]
    missing, unused = unrendered(
        hits, [Quoted("README.md", "3.20x", "s"), Quoted("README.md", "1.1x", "s")]
    )
    assert "3.20x" not in {h.figure for h in missing} and "11 min" in {h.figure for h in missing}
    assert [q.figure for q in unused] == ["1.1x"]


def test_a_reason_that_no_longer_holds_is_named() -> None:
    def reason(figure: str, source: str) -> str | None:
        return check_reason(Quoted("docs/local-run.md", figure, source))

    # a configured value: local.generator's small draft is padded to 1.5% of the target
    share = "local.generator.drafts.small.weight_share"
    assert reason("1.5%", f"config {share}: the small draft's padding") is None
    assert "default is 0.015, not 2%" in (reason("2%", f"config {share}: x") or "")
    # "not the default" is checked against today's default (apart without local.tiered)
    assert reason("1 s", "not the default local.server_binding=isolated: x") is None
    assert "apart is the default of local.server_binding now" in (
        reason("1 s", "not the default local.server_binding=apart: x") or ""
    )
    assert "starts with one of" in (reason("1 s", "measured: on some machine") or "")
    assert "says nothing after" in (reason("1 s", "goal:") or "")


@pytest.mark.process  # runs git show
def test_a_historical_figure_must_stand_in_its_commit() -> None:
    # f683613 published 1.18-1.55 s in its message; it did not publish 9.99 s.
    source = "historical f683613: the cpu_binding diagnostic"
    assert check_reason(Quoted("docs/local-run.md", "1.18-1.55 s", source)) is None
    assert "does not publish '9.99 s'" in (
        check_reason(Quoted("docs/local-run.md", "9.99 s", source)) or ""
    )
    assert "no commit 0000000" in (check_reason(Quoted("x", "1 s", "historical 0000000: x")) or "")


@pytest.mark.process  # runs git show for the historical reasons
def test_every_quoted_reason_still_holds() -> None:
    assert [e for q in read_quoted() if (e := check_reason(q))] == []


def test_a_quoted_figure_needs_a_source(tmp_path: Path) -> None:
    page = tmp_path / "quoted.md"
    page.write_text("| file | figure | source |\n| --- | --- | --- |\n| README.md | 3x | |\n")
    with pytest.raises(ValueError, match="has no source"):
        read_quoted(page)


# --- measuring ----------------------------------------------------------------------------


@pytest.mark.process  # runs commands (bash, git)
def test_measure_runs_the_command_and_records_what_it_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    measurement = Measurement(
        "make-test",
        "echo '== 3 passed in 1s =='; echo 'test_2 passed'; echo '2 passed, 1 deselected'",
        lambda o: suite_figures(o, fresh_clone=False),
    )
    record = run(measurement, root=tmp_path)
    assert record.provenance.commit is None  # not a git tree
    assert "3 passed in 1s" in capsys.readouterr().out  # shown while it ran
    assert record.figures.passed == 5  # type: ignore[union-attr]
    assert record.figures.wall_s > 0  # type: ignore[union-attr]
    assert record.provenance.kind == "measured"
    assert record.machine.load_average_end is not None
    assert record.remeasure == "python -m bench.figures measure make-test"


# A real JUnit XML: pytest -o junit_family=xunit1 over 73 quick tests of this repository
# (tests/test_calendar.py, tests/loadtest/test_processes.py, test_config_rejections.py).
JUNIT_SAMPLE = ROOT / "tests" / "bench" / "data" / "junit" / "junit.xml"


def _suite(workdir: Path, started: float) -> TestSuiteFigures:
    return suite_figures(Outcome(workdir, 9.0, "== 73 passed in 6s ==", started), False, JUNIT_XML)


def test_the_slowest_tests_are_read_from_pytests_junit_xml(tmp_path: Path) -> None:
    written = tmp_path / JUNIT_XML
    written.parent.mkdir(parents=True)
    shutil.copy(JUNIT_SAMPLE, written)
    figures = _suite(tmp_path, time.time() - 60)
    times = [float(c.get("time", "")) for c in ElementTree.parse(JUNIT_SAMPLE).iter("testcase")]
    assert figures.passed == 73 and len(times) == 73
    slowest = figures.slowest
    assert slowest is not None
    assert [t.seconds for t in slowest] == sorted(times, reverse=True)[:20]
    assert figures.tests_s == pytest.approx(sum(times))
    # The lingering-child test waits out a 1 s grace: the slowest of the sample by far.
    assert slowest[0].test == (
        "tests/loadtest/test_processes.py::"
        "test_a_child_that_outlives_its_leader_is_killed_after_the_grace"
    )
    for test in slowest:  # each is pytest's node id: a file here, a test function in it
        file, name = test.test.split("::")
        assert f"def {name.split('[')[0]}(" in (ROOT / file).read_text(), test.test
    assert any(re.search(r"::test_config_rejects\[[a-z0-9-]+\]$", t.test) for t in slowest)


def test_a_junit_xml_that_is_stale_or_names_no_file_is_not_recordable(tmp_path: Path) -> None:
    written = tmp_path / JUNIT_XML
    written.parent.mkdir(parents=True)
    shutil.copy(JUNIT_SAMPLE, written)
    with pytest.raises(MeasureError, match="written by the measured command"):
        _suite(tmp_path, time.time() + 60)  # left by an earlier run
    written.write_text(re.sub(r' file="[^"]*"', "", JUNIT_SAMPLE.read_text()))  # xunit2
    with pytest.raises(MeasureError, match="junit_family=xunit1"):
        _suite(tmp_path, time.time() - 60)
    written.write_text(
        '<testsuites><testsuite><testcase classname="tests.x.test_y.TestZ" name="test_w[a-b]" '
        'file="tests/x/test_y.py" time="1.5"/></testsuite></testsuites>'
    )
    [test] = _suite(tmp_path, time.time() - 60).slowest or []
    assert test.test == "tests/x/test_y.py::TestZ::test_w[a-b]" and test.seconds == 1.5


TINY_SUITE = """
import time

import pytest


@pytest.mark.parametrize("seconds", [0.3, 0.0])
def test_sleeps(seconds):
    time.sleep(seconds)


def test_quick():
    pass
"""


@pytest.mark.process  # runs pytest in a subprocess
@pytest.mark.parametrize("name", ["make-test", "ci-run"])
def test_the_suites_measurements_have_pytest_write_the_junit_xml_they_read(
    tmp_path: Path, name: str
) -> None:
    """The record's own environment makes pytest write the JUnit XML its extraction reads."""
    (tmp_path / "test_tiny.py").write_text(TINY_SUITE)
    recorded = MEASUREMENTS[name]
    command = f"{sys.executable} -m pytest -q -p no:cacheprovider test_tiny.py"
    record = run(Measurement(name, command, recorded.extract, env=recorded.env), root=tmp_path)
    suite = record.figures
    assert isinstance(suite, TestSuiteFigures) and suite.passed == 3 and suite.slowest
    assert suite.slowest[0].test == "test_tiny.py::test_sleeps[0.3]"
    assert suite.slowest[0].seconds >= 0.3 and len(suite.slowest) == 3
    assert "PYTEST_ADDOPTS='--junitxml=runs/figures/junit.xml -o junit_family=xunit1'" in (
        record.command
    )
    # The index of the records shows them; a suite without them shows no such section.
    index = render_index({name: record})
    assert f"## The slowest tests of {name}" in index
    assert "| `test_tiny.py::test_sleeps[0.3]` |" in index
    assert "The 3 slowest tests of" in index and "100% of the" in index
    bare = record.model_copy(
        update={"figures": suite.model_copy(update={"slowest": None, "tests_s": None})}
    )
    assert "slowest" not in render_index({name: bare})


@pytest.mark.process  # runs commands (bash, git)
def test_a_failing_command_writes_no_record(tmp_path: Path) -> None:
    measurement = Measurement("x", "exit 3", lambda o: suite_figures(o, False))
    with pytest.raises(MeasureError, match="exited with 3"):
        run(measurement, root=tmp_path)
    with pytest.raises(MeasureError, match="no pytest summary"):
        run(Measurement("x", "echo ok", lambda o: suite_figures(o, False)), root=tmp_path)


@pytest.mark.process  # runs commands (bash, git)
def test_a_fresh_clone_measures_the_committed_tree_and_is_removed(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    (repo / "committed").write_text("x")
    subprocess.run([*git, "add", "committed"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "c"], cwd=repo, check=True)
    (repo / "uncommitted").write_text("x")
    measurement = Measurement(
        "ci-run",
        'test -f committed && test ! -f uncommitted && echo "$MARK 1 passed"',
        lambda o: suite_figures(o, fresh_clone=True),
        fresh_clone=True,
        env={"MARK": "=="},
    )
    record = run(measurement, root=repo)
    assert record.figures.passed == 1  # type: ignore[union-attr]
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True
    ).stdout.strip()
    assert record.provenance.commit == head  # untracked files do not make it "+"
    assert record.provenance.text() == f"measured at commit {head}"
    assert record.command == "git clone <repo> fresh && cd fresh && MARK=== test -f committed " + (
        '&& test ! -f uncommitted && echo "$MARK 1 passed"'
    )
    assert list((repo / "runs").iterdir()) == []


def _summary_json() -> str:
    golden = json.loads(GOLDEN_SUMMARY.read_text())
    golden["run"] = {
        "started_at": "2026-01-01T00:00:00Z",
        "model": "m",
        "urls": {"baseline": "http://b", "speculative": "http://s"},
        "variant_labels": {"baseline": "Base", "speculative": "SD"},
        "request": {
            "model": "m",
            "max_tokens": 20,
            "temperature": 0.0,
            "ignore_eos": True,
            "seed": 0,
            "api": "chat",
            "timeout_s": 5.0,
        },
        "load_shape": {"concurrency": 2, "request_rate": None, "max_duration_s": 60.0},
        "measured_requests": 40,
        "warmup_requests": 3,
        "seed": 0,
        "slo": {"ttft_ms": 45.0, "tpot_ms": 12.0, "e2e_ms": 400.0},
    }
    return json.dumps(golden)


def test_local_run_figures_come_from_the_runs_own_files(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "20260101-000000"
    run_dir.mkdir(parents=True)
    (run_dir / "summary.json").write_text(_summary_json())
    (run_dir / "local_run.json").write_text(
        json.dumps(
            {
                "headline": {"acceptance_by_class": {"structured": 0.7, "open_ended": 0.1}},
                "timings_s": {"models": 10.0, "load_test": 20.0, "total": 40.0},
            }
        )
    )
    figures = local_run_figures(Outcome(tmp_path, 50.0, "", 0.0), fresh_clone=False)
    golden = json.loads(GOLDEN_SUMMARY.read_text())
    e2e = golden["statistics"]["by_class"]["structured"]["speedup"]["e2e_ms"]["mean"]
    assert figures.e2e_speedup["structured"].estimate == e2e["estimate"]
    assert figures.e2e_speedup["structured"].low == e2e["low"]
    assert figures.e2e_speedup["structured"].n == e2e["n"]
    assert figures.phases_s == {"install": 10.0, "models": 10.0, "load_test": 20.0}
    assert figures.acceptance_by_class == {"structured": 0.7, "open_ended": 0.1}
    assert figures.lossless_prompts == golden["lossless"]["prompts_compared"]
    assert figures.max_tokens == 20
    with pytest.raises(MeasureError, match="written by the measured command"):
        local_run_figures(Outcome(tmp_path, 50.0, "", 1e12), fresh_clone=False)
    (run_dir / "local_run.json").write_text(
        json.dumps({"headline": {"acceptance_by_class": {}}, "timings_s": {"total": 1.0}})
    )
    with pytest.raises(MeasureError, match="no per-class acceptance"):
        local_run_figures(Outcome(tmp_path, 50.0, "", 0.0), fresh_clone=False)


def test_local_run_figures_carry_the_drafter_the_positions_and_the_tiered_arm(
    tmp_path: Path,
) -> None:
    # The EAGLE3 and tiered records (issues 24 and 26) read these from the same two files.
    run_dir = tmp_path / "runs" / "20260101-000000"
    run_dir.mkdir(parents=True)
    summary = json.loads(_summary_json())
    summary["run"]["analysis"] = None
    summary["arms"]["speculative"]["acceptance"]["per_position_rate"] = [0.8, 0.6, 0.4]
    summary["arms"]["tiered"] = summary["arms"]["baseline"]
    interval = {"estimate": 1.1, "low": 0.9, "high": 1.3, "n": 16, "confidence": 0.95}
    summary["tiered"] = {
        "routing": {"class_header": "x-prompt-class", "speculative_classes": ["structured"]},
        "by_class": {
            "structured": {
                "prompt_class": "structured",
                "routed_to": "speculative",
                "vs_baseline": {**interval, "estimate": 3.0},
                "vs_speculative": interval,
                "speculative_vs_baseline": {**interval, "estimate": 2.9},
                "held": True,
                "reason": "within",
            }
        },
        "lossless": {**summary["lossless"], "exact_matches": 31, "prompts_compared": 32},
        "unpaired": 0,
        "gateway": GATEWAY_COST.model_dump(mode="json"),
    }
    (run_dir / "summary.json").write_text(json.dumps(summary))
    headline = {"acceptance_by_class": {"structured": 0.7, "open_ended": 0.1}}
    local_run = {"headline": headline, "timings_s": {"total": 40.0}}
    (run_dir / "local_run.json").write_text(
        json.dumps(
            {**local_run, "models": {"draft": {"kind": "eagle3", "generation_seconds": 58.2}}}
        )
    )
    figures = local_run_figures(Outcome(tmp_path, 50.0, "", 0.0), fresh_clone=False)
    assert figures.drafter == "eagle3" and figures.drafter_generation_s == 58.2
    assert figures.acceptance_per_position == [0.8, 0.6, 0.4]
    assert figures.tiered is not None
    (row,) = figures.tiered.by_class
    assert (row.prompt_class, row.routed_to, row.held) == ("structured", "speculative", True)
    assert row.vs_baseline.estimate == 3.0 and row.speculative_vs_baseline is not None
    assert (figures.tiered.lossless_exact_matches, figures.tiered.lossless_prompts) == (31, 32)
    assert figures.tiered.gateway == GATEWAY_COST  # the record keeps the gateway's cost
    assert set(figures.failed_requests) == {"baseline", "speculative", "tiered"}
    # A draft model's manifest, and a run without the gateway.
    del summary["tiered"], summary["arms"]["tiered"]
    (run_dir / "summary.json").write_text(json.dumps(summary))
    (run_dir / "local_run.json").write_text(
        json.dumps({**local_run, "models": {"draft": {"kind": "draft"}}})
    )
    figures = local_run_figures(Outcome(tmp_path, 50.0, "", 0.0), fresh_clone=False)
    assert figures.drafter == "draft-model" and figures.tiered is None


def test_local_run_figures_keep_the_headlines_step_costs(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "20260101-000000"
    run_dir.mkdir(parents=True)
    (run_dir / "summary.json").write_text(_summary_json())
    interval = SummaryInterval(estimate=3.0, low=2.8, high=3.2, n=16, confidence=0.95)
    kept = [
        HostExpectation(
            prompt_class=name,
            costs=StepCosts(
                baseline_step_ms=18.0,
                speculative_step_ms=29.0,
                tokens_per_step=5.8,
                baseline_ttft_ms=60.0,
                speculative_ttft_ms=75.0,
                output_tokens=128.0,
            ),
            predicted_e2e_speedup=interval,
            measured_e2e_speedup=interval,
        ).model_dump(mode="json")
        for name in ("structured", "open_ended")
    ]
    headline = {
        "acceptance_by_class": {"structured": 0.7, "open_ended": 0.1},
        "host_expectation": kept,
    }
    (run_dir / "local_run.json").write_text(
        json.dumps({"headline": headline, "timings_s": {"total": 40.0}})
    )
    figures = local_run_figures(Outcome(tmp_path, 50.0, "", 0.0), fresh_clone=False)
    assert figures.host_expectation is not None
    structured = figures.host_expectation["structured"]
    assert structured.step_ratio == pytest.approx(29 / 18)
    assert structured.draft_cost_per_step_ms == pytest.approx(11.0)
    assert structured.predicted.estimate == 3.0 and structured.agrees is True


def test_tune_figures_come_from_tune_json(tmp_path: Path) -> None:
    interval = {"estimate": 1.5, "low": 1.2, "high": 1.8, "n": 16, "confidence": 0.95}
    tune = {
        "tolerance": 0.15,
        "plan": {"server_starts": 10, "runs": []},
        "checks": [
            {
                "draft": "small",
                "prompt_class": "structured",
                "k": 4,
                "predicted_speedup": 1.6,
                "measured": {"k": 4, "role": "holdout", "e2e_speedup": interval},
                "relative_error": 0.0667,
                "within_tolerance": True,
                "components": [
                    {"name": "tokens_per_step", "predicted": 4.1, "measured": 4.0, "source": ""},
                    {"name": "step_ms", "predicted": 18.0, "measured": None, "source": ""},
                ],
            }
        ],
        "recommendations": [
            {"scope": "overall", "draft": "small", "k": 3, "predicted_speedup": 1.4}
        ],
        "break_even": [
            {
                "prompt_class": "open_ended",
                "setting": {"draft": "small", "k": 3},
                "points": [[1, {"k": 3, "role": "break_even", "e2e_speedup": interval}]],
                "break_even_concurrency": None,
                "max_num_seqs": 4,
            }
        ],
        "cost": {
            "basis": {"instance_type": "m7i.large", "arm_usd_per_hour": 0.1, "nominal": True},
            "arms": [
                {
                    "setting": {"draft": None, "k": 0},
                    "points": [
                        {
                            "concurrency": 4,
                            "output_tokens": 10,
                            "wall_s": 1.0,
                            "output_throughput_tok_s": 349.0,
                            "usd_per_million_output_tokens": 0.08,
                        }
                    ],
                    "optimal": {"concurrency": 4},
                }
            ],
        },
    }
    tune["models"] = [
        {
            "draft": "eagle3",
            "drafter": "eagle3",
            "prompt_class": "structured",
            "acceptance": {"source": "counters", "per_position_rate": [0.9, 0.7]},
            "acceptance_from_k": 8,
            "steps": [{"k": 2, "role": "fit", "step_ms": 30.0, "baseline_step_ms": 20.0}],
        }
    ]
    tune["drafter_choices"] = [
        {
            "scope": "structured",
            "drafter": "eagle3",
            "draft": "eagle3",
            "k": 4,
            "predicted_speedup": 2.4,
            "runner_up_drafter": "draft-model",
            "runner_up_draft": "small",
            "runner_up_k": 6,
            "runner_up_predicted_speedup": 2.0,
            "measured_k": 4,
            "runner_up_measured_k": 6,
            "margin": interval,
            "overrides": "-c x=y",
        }
    ]
    out = tmp_path / "runs" / "figures" / "tune"
    out.mkdir(parents=True)
    (out / "tune.json").write_text(json.dumps(tune))
    figures = tune_figures(Outcome(tmp_path, 443.0, "", 0.0))
    (fit,) = figures.fits
    assert fit.per_position_rate == [0.9, 0.7] and fit.acceptance_from_k == 8
    assert fit.draft_cost_ms == {2: 10.0} and fit.relative_step == {2: 1.5}
    (choice,) = figures.drafter_choices
    assert (choice.drafter, choice.runner_up_draft, choice.runner_up_predicted) == (
        "eagle3",
        "small",
        2.0,
    )
    assert choice.margin is not None and choice.margin.estimate == 1.5
    point = figures.held_out[0]
    assert (point.predicted, point.measured.estimate, point.measured.n) == (1.6, 1.5, 16)
    assert point.tau == (4.1, 4.0) and point.step_ms is None
    assert figures.server_starts == 10 and figures.recommendations[0].measured is None
    assert figures.break_even[0].speedup_by_concurrency == {1: 1.5}
    assert figures.cost is not None and figures.cost.arms[0].arm == "baseline"
    assert figures.cost.arms[0].by_concurrency[4].output_throughput_tok_s == 349.0


def test_miniature_figures_come_from_its_json(tmp_path: Path) -> None:
    out = tmp_path / "runs" / "figures" / "miniature.json"
    out.parent.mkdir(parents=True)
    cases = ("target_step_1", "target_verify_8", "draft_step_1", "trained_target_step_1")
    out.write_text(
        json.dumps(
            {
                "k": 7,
                "draft": "drafts/small-0123abcd",
                "weight_bytes_per_step": {
                    "target": 2**20 * 147,
                    "draft": 2**20,
                    "trained_target": 0,
                },
                "median_ms": dict(zip(cases, (18.9, 32.1, 1.36, 2.2), strict=True)),
                "p90_ms": dict(zip(cases, (19.3, 32.6, 1.46, 2.27), strict=True)),
                "implied_read_gb_per_s": 8.1,
            }
        )
    )
    figures = miniature_figures(Outcome(tmp_path, 1.0, "", 0.0))
    assert figures.draft == "small" and figures.weight_mib["target"] == 147.0
    records = load_records()
    records["miniature"] = records["miniature"].model_copy(update={"figures": figures})
    doc = render_document(
        ROOT / "docs" / "x.md", "<!-- figures:miniature -->\n<!-- /figures:miniature -->", records
    )
    assert "| 32.1 ms (**1.70x** one step: nearer one step than 8," in doc
    assert "(the padding makes a step 8.6x dearer)" in doc
    # The opposite numbers, the opposite words: a verify step of 8 tokens costing 4 steps
    # (more than sqrt(8) = 2.83) and an unpadded target slower than the padded one.
    opposite = figures.model_copy(
        update={"median_ms": {**figures.median_ms, "target_verify_8": 75.6,
                              "trained_target_step_1": 37.8}}
    )  # fmt: skip
    records["miniature"] = records["miniature"].model_copy(update={"figures": opposite})
    doc = render_document(
        ROOT / "docs" / "x.md", "<!-- figures:miniature -->\n<!-- /figures:miniature -->", records
    )
    assert "(**4.00x** one step: nearer 8 steps than one: each token pays its own compute)" in doc
    assert "(the padded step is 2.0x cheaper than the unpadded one)" in doc


def test_spans_collapse_when_the_figures_round_alike() -> None:
    assert span([0.019, 0.016, 0.024]) == "0.02"
    assert span([0.042, 0.049]) == "0.04-0.05"


def test_bench_results_files_are_records_with_every_repetition() -> None:
    workers = load_records()["bench-workers"]
    results = json.loads((ROOT / "bench" / "results_workers.json").read_text())
    assert workers.command == results["command"].strip()
    point = workers.figures.point(256, "locust_p2")  # type: ignore[union-attr]
    assert len(point.itl_token_p99_by_repetition) == results["repetitions"]


def _bench_result(instrument: str, reported: dict[str, object] | None) -> dict[str, object]:
    pair = {"p50": 0.1, "p99": 0.2}
    return {
        "level": 64,
        "instrument": instrument,
        "label": instrument,
        "ttft_ms": pair,
        "itl_token_ms": pair,
        "chunk_gap_ms": pair,
        "e2e_ms": pair,
        "load": {"tokens_per_s": 100.0},
        "token_count": {"requests_with_count": 0, "mismatched_requests": 0},
        **({"reported": reported} if reported is not None else {}),
    }


def test_a_bench_record_names_the_tree_measured_and_what_each_instrument_reports() -> None:
    results = {
        "started_at": "2026-01-01T00:00:00Z",
        "command": "python -m bench ",
        "commit": "abc1234",
        "machine": {"cpus": 2, "platform": "Linux"},
        "results": [
            _bench_result(
                "aiperf", {"chunk_times": 14.0, "itl_values": 1.0, "chunk_tokens": False}
            ),
            # results from before the bench measured what each instrument reports
            _bench_result("vllm", None),
            _bench_result(
                "locust_p1", {"chunk_times": None, "itl_values": None, "chunk_tokens": None}
            ),
        ],
    }
    record = bench_record("bench", results)
    assert record.provenance.text() == "measured at commit abc1234"
    figures = record.figures
    assert figures.point(64, "aiperf").reported == BenchReported(  # type: ignore[union-attr]
        chunk_times=14.0, itl_values=1.0, chunk_tokens=False
    )
    assert figures.point(64, "vllm").reported is None  # type: ignore[union-attr]
    assert figures.point(64, "locust_p1").reported is None  # type: ignore[union-attr]
    assert figures.point(64, "aiperf").token_count_mismatches is None  # type: ignore[union-attr]
    assert record.machine.cpu == "Linux"  # results from before the bench named the CPU
    del results["commit"]
    assert bench_record("bench", results).provenance.commit is None


@pytest.mark.process  # platform.platform() runs `uname -p`
def test_the_bench_names_the_cpu_as_the_other_records_do() -> None:
    from bench.__main__ import machine
    from local_run.machine import cpu_model

    results = {
        "started_at": "2026-01-01T00:00:00Z",
        "command": "python -m bench ",
        "machine": machine(),
        "results": [],
    }
    assert bench_record("bench", results).machine.cpu == cpu_model()


def _peer_results() -> dict[str, object]:
    """A results file with our generator, vllm bench serve and AIPerf at 64 and 256 streams,
    each reporting per request what the bench reads from that instrument's output."""
    per_chunk = {"chunk_times": 14.0, "itl_values": 13.0, "chunk_tokens": True}
    per_gap = {"chunk_times": 14.0, "itl_values": 13.0, "chunk_tokens": False}
    per_request = {"chunk_times": 14.0, "itl_values": 1.0, "chunk_tokens": False}
    results = []
    for level in (64, 256):
        for instrument, shown in [
            ("locust_p1", per_chunk),
            ("locust_p2", per_chunk),
            ("vllm", per_gap),
            ("aiperf", per_request),
        ]:
            results.append({**_bench_result(instrument, shown), "level": level})
    return {
        "started_at": "2026-01-01T00:00:00Z",
        "command": "python -m bench ",
        "commit": "abc1234",
        "duration_s": 900.0,
        "repetitions": 3,
        "machine": {"cpus": 2, "platform": "Linux"},
        "results": results,
    }


def _render_bench(name: str, results: dict[str, object], path: Path | None = None) -> str:
    records = load_records()
    records["bench"] = bench_record("bench", results)
    text = f"<!-- figures:{name} -->\n<!-- /figures:{name} -->"
    return render_document(path or ROOT / "docs" / "bench.md", text, records)


def test_the_instruments_table_says_what_each_reports_from_what_the_bench_read() -> None:
    results = _peer_results()
    doc = _render_bench("bench-instruments", results)
    assert (
        "| 64 | aiperf | 0.10 / 0.20 | 0.10 / 0.20 | 14 chunk times, 1 ITL value: one ITL per "
        "request (its mean), not a per-token distribution; tokens per chunk not counted |"
    ) in doc
    assert (
        "| 64 | vllm | 0.10 / 0.20 | 0.10 / 0.20 | 14 chunk times, 13 ITL values: one ITL " in doc
    )
    assert "each chunk counted as one token; tokens per chunk not counted |" in doc
    assert "| 256 | locust_p1 |" in doc and "divided by the tokens the chunk carried" in doc
    assert "locust_p2" not in doc  # ours from one process, beside the peers
    assert "measured at commit abc1234" in doc and "median of 3 interleaved" in doc
    # The words follow the record: an AIPerf that counted tokens per chunk would say so.
    for result in results["results"]:  # type: ignore[attr-defined]
        if result["instrument"] == "aiperf":
            result["reported"] = {"chunk_times": 14.0, "itl_values": 13.0, "chunk_tokens": True}
            result["ttft_ms"] = {"p50": -0.001, "p99": 41.4}
    doc = _render_bench("bench-instruments", results)
    assert (
        "| 64 | aiperf | 0.00 / 41.40 | 0.10 / 0.20 | 14 chunk times, 13 ITL values: per token"
        in doc
    )


def test_the_readme_quotes_aiperf_beside_vllm_bench_serve_and_needs_it() -> None:
    results = _peer_results()
    readme = _render_bench("readme-bench", results, ROOT / "README.md")
    assert "AIPerf: 0.20 ms and 0.20 ms, one ITL per request (its mean)" in readme
    assert "its ITL: one ITL per chunk gap, each chunk counted as one token" in readme
    # A vllm bench serve that divided each gap by its tokens is not said to count chunks.
    for result in results["results"]:  # type: ignore[attr-defined]
        if result["instrument"] == "vllm":
            result["reported"] = {"chunk_times": 14.0, "itl_values": 13.0, "chunk_tokens": True}
    readme = _render_bench("readme-bench", results, ROOT / "README.md")
    assert "its ITL: per token: each chunk gap divided by the tokens the chunk carried" in readme
    assert "each chunk counted as one token" not in readme
    results["results"] = [
        r
        for r in results["results"]  # type: ignore[attr-defined]
        if r["instrument"] != "aiperf"
    ]
    with pytest.raises(RegionError, match=r"no aiperf at 64 streams: run the whole bench"):
        _render_bench("readme-bench", results, ROOT / "README.md")


def test_the_bench_bar_says_no_when_a_figure_misses_it() -> None:
    records = load_records()
    bench = records["bench"].figures
    points = [
        p.model_copy(update={"ttft_ms": (0.0, 2.5)}) if p.instrument == "locust_p1" else p
        for p in bench.points  # type: ignore[union-attr]
    ]
    records["bench"] = records["bench"].model_copy(
        update={"figures": bench.model_copy(update={"points": points})}
    )
    doc = render_document(
        ROOT / "bench" / "README.md",
        "<!-- figures:bench-bar --><!-- /figures:bench-bar -->",
        records,
    )
    assert "| TTFT error p99 | 2.50 ms" in doc
    assert "| ≤ 2 ms | no (vllm: no) |" in doc


def test_a_margin_whose_interval_holds_1_is_never_called_faster() -> None:
    from bench.figures.records import Interval
    from bench.figures.regions import _margin_text

    assert "faster than b" in _margin_text(Interval(estimate=1.2, low=1.1, high=1.3, n=16), "b")
    spans = _margin_text(Interval(estimate=1.05, low=0.86, high=1.22, n=16), "b")
    assert "faster" not in spans and "can't tell apart from b" in spans
    assert "slower than b" in _margin_text(Interval(estimate=0.8, low=0.7, high=0.9, n=16), "b")
    assert _margin_text(None, "b") == ""


def test_the_drill_region_states_what_the_analysis_decided_from_the_record() -> None:
    from bench.figures.regions import guardrails_drill

    held = _records_with(
        "guardrails-drill",
        time_to_abort_s={"acceptance_below_floor": 9.0, "arm_metrics_missing": 7.0},
        healthy_analysis=["rollback analysis: Running, no abort (102 measurements)"],
        late_start_analysis="rollback analysis: Running, no abort (102 measurements)",
    )
    text = guardrails_drill(held)
    assert "**1 of 1 healthy runs held**" in text
    assert "drifted mix **aborted after 9.0 s**" in text
    # The opposite numbers give the opposite words.
    broke = _records_with(
        "guardrails-drill",
        time_to_abort_s={"acceptance_below_floor": None, "arm_metrics_missing": None},
        healthy_analysis=["rollback analysis: Failed at 16s by spec-decode-arm-metrics-missing"],
        late_start_analysis="rollback analysis: Failed at 30s by spec-decode-route-falling-back",
    )
    text = guardrails_drill(broke)
    assert "**0 of 1 healthy runs held**" in text
    assert "drifted mix **did not abort**" in text and "killed server **did not abort**" in text
    assert "Failed at 30s" in text


def test_the_lifecycle_region_states_its_conclusion_from_the_record() -> None:
    from bench.figures.regions import guardrails_lifecycle

    records = load_records()
    figures = records["guardrails-lifecycle"].figures
    assert isinstance(figures, GuardrailsLifecycleFigures)
    assert "0 of 5 healthy timelines aborted; every one of the 5 faults aborted" in (
        guardrails_lifecycle(records)
    )
    rows = [
        t.model_copy(update={"aborted": True, "abort_at_s": 600.0})
        if t.timeline == "idle night"
        else t.model_copy(update={"aborted": False, "windows_to_abort": None})
        if t.kind == "fault"
        else t
        for t in figures.timelines
    ]
    before = figures.as_rendered_before.model_copy(update={"aborted": False})
    text = guardrails_lifecycle(
        _records_with("guardrails-lifecycle", timelines=rows, as_rendered_before=before)
    )
    assert "1 of 5 healthy timelines aborted" in text
    assert "5 of 5 faults did not abort within two windows" in text
    assert "as rendered before did not abort." in text
