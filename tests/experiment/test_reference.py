"""docs/config.md and docs/schemas/config.schema.json are generated from the typed config, kept
current, and describe nearly every setting."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from experiment.config import ExperimentConfig
from experiment.reference import MARKDOWN, SCHEMA, json_schema, leaves, main, markdown, rows

ROOT = Path(__file__).resolve().parents[2]
CONFIG_PACKAGE = ROOT / "experiment" / "config"


def test_the_committed_reference_is_generated_from_the_config() -> None:
    assert (ROOT / MARKDOWN).read_text() == markdown(), (
        "docs/config.md is stale: run `python -m experiment.reference` and commit it"
    )
    assert json.loads((ROOT / SCHEMA).read_text()) == json_schema(), (
        "docs/schemas/config.schema.json is stale: run `python -m experiment.reference`"
    )


def test_the_command_writes_both_files_and_check_notices_a_stale_one(
    tmp_path: Path, capsys
) -> None:
    assert main(["--root", str(tmp_path), "--check"]) == 1
    assert main(["--root", str(tmp_path)]) == 0
    assert (tmp_path / MARKDOWN).read_text() == markdown()
    assert json.loads((tmp_path / SCHEMA).read_text()) == json_schema()
    assert main(["--root", str(tmp_path), "--check"]) == 0
    (tmp_path / MARKDOWN).write_text(markdown().replace("Hidden size", "Hiden size"))
    assert main(["--root", str(tmp_path), "--check"]) == 1
    assert "docs/config.md" in capsys.readouterr().out


def _schema_property(schema: dict[str, Any], owner: type[BaseModel], name: str) -> dict[str, Any]:
    model = schema if owner is ExperimentConfig else schema["$defs"][owner.__name__]
    return model["properties"][name]


def test_at_least_95_percent_of_settings_are_described_in_the_reference_and_the_schema() -> None:
    settings = leaves()
    text, schema = markdown(), json_schema()
    described = [
        row
        for row in settings
        if row.field.description
        and row.field.description.replace("|", "\\|") in text
        and _schema_property(schema, row.owner, row.name).get("description")
        == row.field.description
    ]
    assert len(settings) > 150  # every section is walked, mapping entries included
    undescribed = sorted({row.path for row in settings} - {row.path for row in described})
    assert len(described) / len(settings) >= 0.95, f"describe these fields: {undescribed}"


def test_the_coverage_count_sees_an_undescribed_field() -> None:
    class Inner(BaseModel):
        plain: int = 1
        told: int = Field(default=2, description="Told.")

    class Outer(BaseModel):
        inner: Inner = Field(default_factory=Inner, description="A section.")
        entries: dict[str, Inner] = Field(default_factory=dict)

    paths = {row.path: bool(row.field.description) for row in leaves(Outer)}
    assert paths == {
        "inner.plain": False,
        "inner.told": True,
        "entries": False,
        "entries.<name>.plain": False,
        "entries.<name>.told": True,
    }


def test_every_section_has_a_table_with_its_nested_sections_and_mapping_entries() -> None:
    text = markdown()
    for section in ExperimentConfig.model_fields:
        assert (f"## `{section}`" in text) != (section in ("project", "region", "account"))
    assert "| `cluster.neuron_nodes.capacity_type` | one of: on-demand, capacity-block," in text
    assert "`pricing.neuron.<on-demand\\|capacity-block\\|reservation>.usd_per_hour`" in text
    assert (
        "| `local.generator.drafts` | mapping (str keys) of the entries below | `entries: sm"
        in (text)
    )
    assert "| `loadtest.variant_labels` | mapping (keys baseline, speculative) of str |" in text
    assert "| `serving.port` | int, >= 1024, <= 65535 | `8000` |" in text
    assert "| `tuning.max_tokens` | int, >= 4 or null | `64` |" in text
    paths = [row.path for row in rows()]
    assert len(paths) == len(set(paths))


def test_no_config_module_is_over_400_lines() -> None:
    sizes = {path.name: len(path.read_text().splitlines()) for path in CONFIG_PACKAGE.glob("*.py")}
    assert len(sizes) > 10
    assert {name: n for name, n in sizes.items() if n > 400} == {}
