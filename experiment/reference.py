"""The configuration reference, generated from the typed config: ``docs/config.md`` (one table
per section: dotted path, type, default, description) and ``docs/schemas/config.schema.json``.

``python -m experiment.reference`` writes both; ``--check`` only says whether they are current
(tests/experiment/test_reference.py fails when they are not).
"""

from __future__ import annotations

import argparse
import enum
import json
import sys
import types
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined, to_jsonable_python

from experiment.config import ExperimentConfig

ROOT = Path(__file__).resolve().parents[1]
MARKDOWN = Path("docs/config.md")
SCHEMA = Path("docs/schemas/config.schema.json")


@dataclass(frozen=True)
class Row:
    """One field of the reference, at its dotted path from the top of the config."""

    path: str
    owner: type[BaseModel]  # the model that declares the field
    name: str
    field: FieldInfo

    @property
    def section(self) -> str:
        return self.path.split(".")[0] if "." in self.path else ""

    @property
    def is_section(self) -> bool:
        """A nested model: its own fields get rows, so it is not a leaf."""
        return _model(self.field.annotation) is not None


def _model(annotation: Any) -> type[BaseModel] | None:
    return (
        annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    )


def rows(model: type[BaseModel] = ExperimentConfig, prefix: str = "") -> Iterator[Row]:
    """Every field reachable from ``model``, depth first, in declaration order. The entries of
    a mapping of models (``pricing.neuron``, ``local.generator.drafts``) appear once, under a
    placeholder key that names the choices (``<on-demand|capacity-block|reservation>``) or
    says what the key is (``<name>``)."""
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        yield Row(path, model, name, field)
        nested = _model(field.annotation)
        if nested is not None:
            yield from rows(nested, f"{path}.")
        elif get_origin(field.annotation) is dict:
            key, value = get_args(field.annotation)
            entry = _model(value)
            if entry is not None:
                placeholder = (
                    "|".join(member.value for member in key)
                    if isinstance(key, type) and issubclass(key, enum.Enum)
                    else "name"
                )
                yield from rows(entry, f"{path}.<{placeholder}>.")


def leaves(model: type[BaseModel] = ExperimentConfig) -> list[Row]:
    """The settings a user sets: every row that is not a nested section."""
    return [row for row in rows(model) if not row.is_section]


def _constraints(metadata: Sequence[Any]) -> list[str]:
    found = []
    for item in metadata:
        for kind, attribute, symbol in (
            (annotated_types.Ge, "ge", ">="),
            (annotated_types.Gt, "gt", ">"),
            (annotated_types.Le, "le", "<="),
            (annotated_types.Lt, "lt", "<"),
        ):
            if isinstance(item, kind):
                found.append(f"{symbol} {getattr(item, attribute)}")
        if isinstance(item, annotated_types.MinLen):
            found.append(f"length >= {item.min_length}")
        pattern = getattr(item, "pattern", None)
        if isinstance(pattern, str):
            found.append(f"matches `{pattern}`")
    return found


def type_text(annotation: Any, metadata: Sequence[Any] = ()) -> str:
    """A type as a user writes its value: ``int >= 1``, ``one of: a, b``, ``list of str``."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:  # a constraint inside a union arrives as a FieldInfo
        inner = [m for a in args[1:] for m in (a.metadata if isinstance(a, FieldInfo) else [a])]
        return type_text(args[0], [*inner, *metadata])
    if origin in (Union, types.UnionType):
        parts = [type_text(arg) for arg in args if arg is not type(None)]
        text = " or ".join(parts) + (" or null" if type(None) in args else "")
    elif origin is Literal:
        text = "one of: " + ", ".join(str(arg) for arg in args)
    elif origin is list:
        text = f"list of {type_text(args[0])}"
    elif origin is dict:
        value = "the entries below" if _model(args[1]) else type_text(args[1])
        key = args[0]
        keys = (
            f"keys {', '.join(str(member.value) for member in key)}"
            if isinstance(key, type) and issubclass(key, enum.Enum)
            else f"{type_text(key)} keys"
        )
        text = f"mapping ({keys}) of {value}"
    elif isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        text = "one of: " + ", ".join(str(member.value) for member in annotation)
    elif _model(annotation) is not None:
        text = "section"
    else:
        text = getattr(annotation, "__name__", str(annotation))
    return ", ".join([text, *_constraints(metadata)])


def default_text(field: FieldInfo) -> str:
    if field.default is PydanticUndefined and field.default_factory is None:
        return "required"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, dict) and any(isinstance(v, BaseModel) for v in value.values()):
        return "entries: " + ", ".join(str(to_jsonable_python(key)) for key in value)
    return json.dumps(to_jsonable_python(value))


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown() -> str:
    """docs/config.md: one table per top-level section, the top-level settings first."""
    lines = [
        "# Configuration reference",
        "",
        "Generated from `experiment/config/` by `python -m experiment.reference`; do not edit.",
        "Set a value in a YAML/JSON file given with `--config FILE`, or with `-c <path>=<value>`",
        "on any command line (`experiment.` before the path is optional). `null` is YAML's null.",
        "Sections nested in a section are listed in its table with their full path.",
    ]
    by_section: dict[str, list[Row]] = {}
    for row in rows():
        if row.section or not row.is_section:
            by_section.setdefault(row.section, []).append(row)
    for section, members in by_section.items():
        title = f"`{section}`" if section else "Top level"
        about = (ExperimentConfig.model_fields[section].description or "") if section else ""
        lines += ["", f"## {title}", ""]
        if about:
            lines += [about, ""]
        lines += ["| path | type | default | description |", "| --- | --- | --- | --- |"]
        for row in members:
            default = "" if row.is_section else f"`{_cell(default_text(row.field))}`"
            cells = (
                f"`{_cell(row.path)}`",
                _cell(type_text(row.field.annotation, row.field.metadata)),
                default,
                _cell(row.field.description or ""),
            )
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def json_schema() -> dict[str, Any]:
    """docs/schemas/config.schema.json: the JSON Schema of a whole configuration file."""
    return ExperimentConfig.model_json_schema()


def _rendered() -> dict[Path, str]:
    return {MARKDOWN: markdown(), SCHEMA: json.dumps(json_schema(), indent=2) + "\n"}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m experiment.reference",
        description=f"Write {MARKDOWN} and {SCHEMA} from the typed configuration.",
    )
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root to write under")
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if a file is not current"
    )
    args = parser.parse_args(argv)
    stale = []
    for relative, text in _rendered().items():
        path = args.root / relative
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(str(relative))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path}")
    if stale:
        print(f"not current: {', '.join(stale)}; run `python -m experiment.reference`")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
