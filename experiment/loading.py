"""Build the ExperimentConfig from its layers, in increasing precedence:

1. the defaults in ``experiment.config`` (the published experiment),
2. the ``experiment`` object in ``cdk.json`` context,
3. a config file (YAML or JSON) named by context ``experiment_file`` or ``--config``,
4. dotted overrides: ``cdk synth -c experiment.serving.num_speculative_tokens=5``.

The same layers apply to the CDK app, the chart synth, the load test and the
local run, so one override changes every consumer at once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from experiment.config import ExperimentConfig

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CONTEXT_KEY = "experiment"
FILE_CONTEXT_KEY = "experiment_file"
OVERRIDE_PREFIX = "experiment."


class ConfigError(ValueError):
    """A configuration problem, phrased as what to change."""


def _deep_merge(base: dict[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _parse_override_value(raw: Any) -> Any:
    # `-c key=value` arrives as a string; JSON/YAML scalars and lists are accepted.
    if not isinstance(raw, str):
        return raw
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw


def _dotted_to_nested(path: str, value: Any) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    cursor = nested
    parts = path.split(".")
    if not all(parts):
        raise ConfigError(f"override key {OVERRIDE_PREFIX}{path!r} has an empty segment")
    for part in parts[:-1]:
        cursor = cursor.setdefault(part, {})
    cursor[parts[-1]] = value
    return nested


def read_config_file(path: str | Path) -> dict[str, Any]:
    file = Path(path)
    if not file.is_absolute():
        file = PROJECT_ROOT / file
    if not file.is_file():
        raise ConfigError(f"config file {str(file)!r} does not exist; check the path you passed")
    data = (
        yaml.safe_load(file.read_text())
        if file.suffix in (".yaml", ".yml")
        else json.loads(file.read_text())
    )
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(file)!r} must hold a mapping at the top level")
    return data


def cdk_json_context(root: Path = PROJECT_ROOT) -> dict[str, Any]:
    cdk_json = root / "cdk.json"
    if not cdk_json.is_file():
        return {}
    return json.loads(cdk_json.read_text()).get("context", {})


def context_from_pairs(pairs: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` command-line overrides as CDK-style context, for the non-CDK CLIs.

    ``experiment.local.max_tokens=32`` and ``local.max_tokens=32`` mean the same thing, so
    ``-c`` works alike for ``cdk synth``, ``python -m local_run`` and ``python -m loadtest``.
    """
    context: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(
                f"-c {pair!r}: write it as key=value, e.g. -c experiment.local.max_tokens=32"
            )
        if key != FILE_CONTEXT_KEY and not key.startswith(OVERRIDE_PREFIX):
            key = OVERRIDE_PREFIX + key
        context[key] = value
    return context


def _format_validation_error(err: ValidationError) -> str:
    lines = ["invalid experiment configuration:"]
    for problem in err.errors():
        where = ".".join(str(part) for part in problem["loc"]) or "(top level)"
        message = problem["msg"].removeprefix("Value error, ")
        if problem["type"] == "extra_forbidden":
            message = "unknown key; check the spelling against experiment/config.py"
        lines.append(f"  - {where}: {message}")
    return "\n".join(lines)


def build_config(
    context: Mapping[str, Any] | None = None,
    config_file: str | Path | None = None,
) -> ExperimentConfig:
    """Layer defaults, context, file and dotted overrides into a validated config.

    ``context`` is CDK context (cdk.json merged with ``-c`` values); when None,
    ``cdk.json`` is read from the project root so non-CDK consumers see the
    same values as ``cdk deploy``.
    """
    context = dict(cdk_json_context() if context is None else context)
    data: dict[str, Any] = {}
    base = context.get(CONTEXT_KEY, {})
    if isinstance(base, str):  # `-c experiment='{"serving": ...}'`
        base = json.loads(base)
    if not isinstance(base, Mapping):
        raise ConfigError(f"context {CONTEXT_KEY!r} must be an object")
    data = _deep_merge(data, base)
    file = config_file or context.get(FILE_CONTEXT_KEY)
    if file:
        data = _deep_merge(data, read_config_file(file))
    for key, raw in sorted(context.items()):
        if key.startswith(OVERRIDE_PREFIX):
            override = _dotted_to_nested(key[len(OVERRIDE_PREFIX) :], _parse_override_value(raw))
            data = _deep_merge(data, override)
    try:
        return ExperimentConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_validation_error(err)) from None
