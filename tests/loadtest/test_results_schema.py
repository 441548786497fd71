"""summary.json is the typed RunSummary; its JSON Schema is published and kept current."""

from __future__ import annotations

import json
from pathlib import Path

from loadtest.__main__ import main
from loadtest.results import SCHEMA_VERSION, RunSummary, summary_json_schema
from loadtest.summary import summarize

SUMMARY_SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "schemas" / "summary.schema.json"


def test_the_committed_schema_is_generated_from_the_model() -> None:
    committed = json.loads(SUMMARY_SCHEMA.read_text())
    assert committed == summary_json_schema(), (
        "docs/schemas/summary.schema.json is stale: run `python -m loadtest schema` and commit it"
    )


def test_schema_command_writes_the_schema(tmp_path: Path, capsys) -> None:
    out = tmp_path / "nested" / "summary.schema.json"
    assert main(["schema", "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == summary_json_schema()
    assert str(out) in capsys.readouterr().out


def test_a_summary_round_trips_and_the_schema_catches_bad_ones(
    fake_run_dir: Path, summary_schema_errors
) -> None:
    summary = summarize(fake_run_dir)
    data = json.loads((fake_run_dir / "summary.json").read_text())
    assert RunSummary.model_validate(data) == summary
    assert summary_schema_errors(data) == []
    wrong_type = json.loads(json.dumps(data))
    wrong_type["arms"]["baseline"]["overall"]["ttft_ms"]["p99"] = "slow"
    assert any("ttft_ms/p99" in e for e in summary_schema_errors(wrong_type))
    unknown_key = json.loads(json.dumps(data))
    unknown_key["arms"]["speculative"]["acceptance"]["acceptance_rat"] = 0.5
    assert any("acceptance_rat" in e for e in summary_schema_errors(unknown_key))
    missing = json.loads(json.dumps(data))
    del missing["lossless"]
    assert any("lossless" in e for e in summary_schema_errors(missing))


def test_report_rebuilds_a_version_1_run_directory_and_keeps_its_cloudwatch_block(
    fake_run_dir: Path, capsys
) -> None:
    # What schema_version 1 wrote: no "cloudwatch" key unless published, no acceptance reason
    # when available, no run.max_duration_s in older run.json files.
    old = json.loads(summarize(fake_run_dir).model_dump_json())
    old["schema_version"] = 1
    del old["arms"]["speculative"]["acceptance"]["reason"]
    old["cloudwatch"] = {"published": True, "namespace": "NS", "datums": 7, "calls": 1}
    (fake_run_dir / "summary.json").write_text(json.dumps(old, indent=1))
    assert main(["report", str(fake_run_dir)]) == 0
    rebuilt = json.loads((fake_run_dir / "summary.json").read_text())
    assert rebuilt["schema_version"] == SCHEMA_VERSION == 15
    assert rebuilt["cloudwatch"] == {
        "published": True,
        "reason": None,
        "namespace": "NS",
        "datums": 7,
        "calls": 1,
    }
    assert "requests ok / sent" in capsys.readouterr().out


def test_report_refuses_a_newer_summary_and_a_foreign_run_json(fake_run_dir: Path, capsys) -> None:
    (fake_run_dir / "summary.json").write_text(json.dumps({"schema_version": 99}))
    assert main(["report", str(fake_run_dir)]) == 2
    err = capsys.readouterr().err
    assert "schema_version 99" in err and "version that wrote it" in err
    (fake_run_dir / "summary.json").unlink()
    run = json.loads((fake_run_dir / "run.json").read_text())
    del run["request"]
    (fake_run_dir / "run.json").write_text(json.dumps(run))
    assert main(["report", str(fake_run_dir)]) == 2
    err = capsys.readouterr().err
    assert "run.json cannot be read" in err and "request" in err
