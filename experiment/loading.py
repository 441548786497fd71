"""Build the ExperimentConfig from its layers, in increasing precedence:

1. the defaults in ``experiment.config`` (the published experiment),
2. the ``experiment`` object in ``cdk.json`` context,
3. a config file (YAML or JSON) named by context ``experiment_file`` or ``--config``,
4. dotted overrides: ``cdk synth -c serving.num_speculative_tokens=5`` (the
   ``experiment.`` prefix is optional: ``-c experiment.serving.num_speculative_tokens=5``
   means the same).

The same layers and the same ``-c KEY=VALUE`` parser serve every command line: the CDK
app, ``python -m charts``, ``python -m loadtest``, ``python -m local_run``, ``python -m
tune``, ``python -m bench.miniature`` and the Locust file (through ``add_config_arguments``
/ ``config_from_arguments``), so one override changes every consumer at once and a mistake
gets the same message everywhere. ``--help-config`` lists every key with its description.

Values are read as YAML 1.2 scalars that keep their text: ``-c
cluster.kubernetes_version=1.35`` is the string ``"1.35"`` for a string field and the number
1.35 for a number field; ``account=012345670123`` keeps its leading zero (YAML 1.1 would
read it as an octal number); only ``true``/``false`` are booleans, so ``namespace=no`` stays
a name.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
import typing
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from experiment.config import ExperimentConfig
from experiment.config.base import EKS_APP
from experiment.config.deploy_pins import PIN_ERROR, PIN_NOTES
from experiment.pins import record as pin_record

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CONTEXT_KEY = "experiment"
FILE_CONTEXT_KEY = "experiment_file"
OVERRIDE_PREFIX = "experiment."
# The top-level sections and fields: `-c serving.x=1` is an override without the prefix.
SECTIONS = frozenset(ExperimentConfig.model_fields)
# A dotted name such as `servng.num_speculative_tokens` is meant as an override even when its
# section is misspelt: treat it as one so it is rejected as an unknown key rather than left
# in the CDK context unread. CDK's own context keys carry ':' or '@' and never match.
_DOTTED_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_-]+)+")


class ConfigError(ValueError):
    """A configuration problem, phrased as what to change."""


class _SourceInt(int):
    """An int that remembers how it was written, so a string field gets that text back."""

    text: str

    def __new__(cls, text: str) -> _SourceInt:
        number = super().__new__(cls, _yaml12_int(text))
        number.text = text
        return number

    def __str__(self) -> str:
        return self.text


class _SourceFloat(float):
    """A float that remembers how it was written (``1.40`` stays ``"1.40"`` in a string)."""

    text: str

    def __new__(cls, text: str) -> _SourceFloat:
        number = super().__new__(cls, _yaml12_float(text))
        number.text = text
        return number

    def __str__(self) -> str:
        return self.text


def _yaml12_int(text: str) -> int:
    if text.startswith(("0o", "0x")):
        return int(text, 0)
    return int(text)  # decimal, leading zeros included


def _yaml12_float(text: str) -> float:
    lowered = text.lower().lstrip("+")
    if lowered in (".inf", "-.inf", ".nan"):
        return float(lowered.replace(".", ""))
    return float(text)


class _ConfigTextLoader(yaml.SafeLoader):
    """YAML with the YAML 1.2 core schema's scalars, numbers keeping their source text."""


# YAML 1.2 core schema (yaml.org/spec/1.2.2, 10.3.2): booleans are true/false only; ints are
# decimal, 0o octal or 0x hex (a leading 0 is decimal); no sexagesimal numbers.
_CORE_RESOLVERS = (
    ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    ("tag:yaml.org,2002:int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", "-+0123456789"),
    (
        "tag:yaml.org,2002:float",
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
        "-+.0123456789",
    ),
)
# Timestamps too are YAML 1.1 only: `as_of: 2026-11-23` stays text, pydantic reads the date.
_REPLACED_TAGS = {f"tag:yaml.org,2002:{name}" for name in ("bool", "int", "float", "timestamp")}
_ConfigTextLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in _REPLACED_TAGS]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
for _tag, _pattern, _first in _CORE_RESOLVERS:
    _ConfigTextLoader.add_implicit_resolver(_tag, re.compile(_pattern), list(_first))


def _construct_int(loader: _ConfigTextLoader, node: yaml.Node) -> _SourceInt:
    assert isinstance(node, yaml.ScalarNode)  # the int tag only resolves scalars
    return _SourceInt(str(loader.construct_scalar(node)))


def _construct_float(loader: _ConfigTextLoader, node: yaml.Node) -> _SourceFloat:
    assert isinstance(node, yaml.ScalarNode)  # the float tag only resolves scalars
    return _SourceFloat(str(loader.construct_scalar(node)))


_ConfigTextLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)
_ConfigTextLoader.add_constructor("tag:yaml.org,2002:float", _construct_float)


def load_config_text(text: str) -> Any:
    """Parse a YAML value (an override, a YAML file) the way every config layer is read."""
    return yaml.load(text, Loader=_ConfigTextLoader)


def load_config_json(text: str) -> Any:
    """Parse JSON (cdk.json, a .json config file) with numbers keeping their text, as YAML."""
    return json.loads(text, parse_int=_SourceInt, parse_float=_SourceFloat)


def _deep_merge(base: dict[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _parse_override_value(raw: Any) -> Any:
    """`-c key=value` arrives as a string: numbers, true/false, null, quoted strings and
    JSON/flow lists and objects are parsed; any other text is taken as written, so a value
    such as ``a quote: see #3`` is not turned into a mapping or cut at a YAML comment."""
    if not isinstance(raw, str):
        return raw
    try:
        value = load_config_text(raw)
    except yaml.YAMLError:
        return raw
    text = raw.strip()
    if isinstance(value, str) and not text.startswith(("'", '"')):
        return raw
    if isinstance(value, dict | list) and not text.startswith(("{", "[")):
        return raw
    return value


def override_path(key: str) -> str | None:
    """The config path a context key overrides (``serving.port``), or None if it is not one."""
    if key.startswith(OVERRIDE_PREFIX):
        return key[len(OVERRIDE_PREFIX) :]
    if key.split(".", 1)[0] in SECTIONS or _DOTTED_KEY.fullmatch(key):
        return key
    return None


def _dotted_to_nested(path: str, value: Any) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    cursor = nested
    parts = path.split(".")
    if not all(parts):
        raise ConfigError(f"override key {path!r} has an empty segment; write e.g. serving.port")
    for part in parts[:-1]:
        cursor = cursor.setdefault(part, {})
    cursor[parts[-1]] = value
    return nested


def read_config_file(path: str | Path) -> dict[str, Any]:
    """A YAML or JSON config file: relative to the working directory, else to the project
    root (where `cdk synth` runs). A file wrapped in `experiment:` (copied from cdk.json's
    context) is read the same as one without it."""
    file = Path(path)
    if not file.is_absolute() and not file.is_file():
        file = PROJECT_ROOT / file
    if not file.is_file():
        raise ConfigError(f"config file {str(file)!r} does not exist; check the path you passed")
    try:
        text = file.read_text()
        data = (
            load_config_text(text) if file.suffix in (".yaml", ".yml") else load_config_json(text)
        )
    except (yaml.YAMLError, ValueError) as err:
        raise ConfigError(f"config file {str(file)!r} is not valid YAML or JSON: {err}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(file)!r} must hold a mapping at the top level")
    if set(data) == {CONTEXT_KEY} and isinstance(data[CONTEXT_KEY], dict):
        return data[CONTEXT_KEY]
    return data


def pinned_version(package: str, root: Path = PROJECT_ROOT) -> str:
    """The version ``package`` is pinned to (``package==X``) in pyproject.toml's dependencies
    or optional dependencies: the one place a pin is written, read by the code that checks
    what is installed."""
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    groups = [project.get("dependencies", []), *project.get("optional-dependencies", {}).values()]
    for requirement in (r for group in groups for r in group):
        name, _, rest = requirement.partition("==")
        if rest and name.strip() == package:
            return rest.split(";")[0].strip()
    raise ConfigError(f"pyproject.toml pins no {package}==VERSION; pin it there")


def cdk_json_context(root: Path = PROJECT_ROOT) -> dict[str, Any]:
    cdk_json = root / "cdk.json"
    if not cdk_json.is_file():
        return {}
    context = load_config_json(cdk_json.read_text()).get("context", {})
    return context if isinstance(context, dict) else {}


def context_from_pairs(pairs: Sequence[str]) -> dict[str, str]:
    """``KEY=VALUE`` command-line overrides as CDK-style context, for the non-CDK CLIs.

    Keys are kept as written; ``build_config`` reads ``experiment.local.max_tokens`` and
    ``local.max_tokens`` alike, exactly as it does for ``cdk synth -c``.
    """
    context: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = (part.strip() for part in pair.partition("="))
        if not sep or not key:
            raise ConfigError(f"-c {pair!r}: write it as key=value, e.g. -c local.max_tokens=32")
        if key not in (CONTEXT_KEY, FILE_CONTEXT_KEY) and override_path(key) is None:
            raise ConfigError(
                f"-c {pair!r}: {key!r} is not a configuration key; the sections are "
                f"{sorted(SECTIONS)}, e.g. -c serving.num_speculative_tokens=5"
            )
        context[key] = value
    return context


HELP_CONFIG = "--help-config"


def config_parser(prog: str, description: str | None) -> argparse.ArgumentParser:
    """A command's parser with the shared configuration options already added; the
    description (a module docstring) keeps its line breaks."""
    parser = argparse.ArgumentParser(
        prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_config_arguments(parser)
    return parser


def add_config_arguments(parser: Any, *, file_option: bool = True) -> None:
    """The configuration options every command line shares (same names, same syntax):
    ``--config FILE``, ``-c KEY=VALUE`` and ``--help-config`` (every key with its
    description). ``file_option=False`` for a parser that owns ``--config`` already (Locust's
    is its own settings file): there ``-c experiment_file=FILE`` names the config file."""
    if file_option:
        parser.add_argument("--config", help="experiment config file (YAML or JSON)")
    parser.add_argument(
        "-c",
        "--context",
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override, e.g. -c serving.num_speculative_tokens=5 (repeatable; the "
        f"'experiment.' prefix is optional, as with cdk synth -c; {HELP_CONFIG} lists the keys)",
    )
    parser.add_argument(
        HELP_CONFIG,
        action=_HelpConfig,
        help="list every -c key with its type, default and description, then exit",
    )


class _HelpConfig(argparse.Action):
    """Prints ``config_help()`` and exits, as ``--help`` does."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(
            option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0, **kwargs
        )

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        print(config_help())
        parser.exit()


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds (``X`` or ``X | None``), so its keys are listed one by one."""
    candidates = typing.get_args(annotation) if typing.get_origin(annotation) else (annotation,)
    models = [c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)]
    return models[0] if len(models) == 1 else None


def config_keys(
    model: type[BaseModel] = ExperimentConfig, prefix: str = ""
) -> Iterator[tuple[str, FieldInfo]]:
    """Every ``-c`` path of the configuration, depth first, with its pydantic field."""
    for name, field in model.model_fields.items():
        nested = _nested_model(field.annotation)
        if nested is None:
            yield prefix + name, field
        else:
            yield from config_keys(nested, f"{prefix}{name}.")


def _type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if not typing.get_args(annotation) else None
    return text or str(annotation).replace("typing.", "")


def config_help(model: type[BaseModel] = ExperimentConfig) -> str:
    """The ``-c`` keys with type, default and the description each field declares."""
    lines = ["configuration keys (-c KEY=VALUE; the 'experiment.' prefix is optional):"]
    for path, field in config_keys(model):
        default = field.get_default(call_default_factory=True)
        default_text = json.dumps(
            default, default=lambda value: getattr(value, "value", str(value))
        )
        lines.append(f"  {path} ({_type_name(field.annotation)}, default {default_text})")
        if field.description:
            lines.append(f"      {' '.join(field.description.split())}")
    return "\n".join(lines)


def context_file_pins(root: Path = PROJECT_ROOT) -> dict[str, Any]:
    """The deploy pins ``make pins`` recorded in cdk.context.json, as context (the CDK CLI
    passes that file's keys to the app itself; the kubectl path reads them here)."""
    try:
        return pin_record.context_entries(root / pin_record.CONTEXT_FILE)
    except pin_record.PinRecordError as err:
        raise ConfigError(str(err)) from None


def config_from_arguments(
    args: Any, *, file_option: bool = True, deploy: bool = False
) -> ExperimentConfig:
    """cdk.json context < ``--config`` file < ``-c`` overrides, as ``cdk synth`` layers them
    (``file_option`` as given to ``add_config_arguments``). ``deploy`` (the kubectl path):
    also the pins of cdk.context.json, and the validation ``cdk synth`` applies
    (``deploy_config``)."""
    pins = context_file_pins() if deploy else {}
    context = {**cdk_json_context(), **pins, **context_from_pairs(args.overrides or [])}
    file = args.config if file_option else None
    return deploy_config(context, file) if deploy else build_config(context, config_file=file)


def deploy_config(
    context: Mapping[str, Any], config_file: str | Path | None = None
) -> ExperimentConfig:
    """The one validation of everything that deploys, ``cdk synth`` (stacks/app.py) and the
    kubectl path (``python -m charts``) alike: the configuration, every deploy pin (all
    missing or malformed ones in one error) and the support calendar, whose warnings are
    printed here and whose refusals stop it (experiment/config/upstreams.py)."""
    config = build_config(context, config_file, for_eks=True)
    if config.upstreams.as_of is not None:
        print(
            f"support calendar: read as of {config.upstreams.as_of} (upstreams.as_of), not today",
            file=sys.stderr,
        )
    for warning in config.calendar().warnings:
        print(f"support calendar: {warning}", file=sys.stderr)
    return config


def _format_validation_error(err: ValidationError) -> str:
    lines = ["invalid experiment configuration:"]
    for problem in err.errors():
        where = ".".join(str(part) for part in problem["loc"]) or "(top level)"
        message = problem["msg"].removeprefix("Value error, ")
        if problem["type"] == "extra_forbidden":
            message = "unknown key; check the spelling against experiment/config.py"
        # A rule that names its own path (`serving.draft_model is ...`) is not prefixed twice.
        lines.append(f"  - {message}" if message.startswith(where) else f"  - {where}: {message}")
    if any(problem["type"] == PIN_ERROR for problem in err.errors()):
        lines.append(
            f"  deploy pins: `make pins` (python -m experiment pins) resolves every one of them "
            f"and records them in {pin_record.CONTEXT_FILE}, which cdk synth and python -m "
            "charts read; a -c value or the config file still overrides a recorded pin"
        )
    return "\n".join(lines)


def build_config(
    context: Mapping[str, Any] | None = None,
    config_file: str | Path | None = None,
    *,
    for_eks: bool = False,
) -> ExperimentConfig:
    """Layer defaults, context, file and dotted overrides into a validated config.

    ``context`` is CDK context (cdk.json merged with ``-c`` values); when None,
    ``cdk.json`` is read from the project root so non-CDK consumers see the
    same values as ``cdk deploy``. The deploy pins recorded under ``experiment:pins`` (from
    cdk.context.json, experiment/pins/record.py) lie under every other layer. ``for_eks``
    (the CDK app, the kubectl path) also requires what only a deploy uses and has no default:
    the deploy pins.
    """
    context = dict(cdk_json_context() if context is None else context)
    data: dict[str, Any] = {}
    base = context.get(CONTEXT_KEY, {})
    if isinstance(base, str):  # `-c experiment='{"serving": ...}'`
        try:
            base = load_config_text(base)
        except yaml.YAMLError as err:
            raise ConfigError(f"context {CONTEXT_KEY!r} is not a JSON/YAML object: {err}") from None
    if not isinstance(base, Mapping):
        raise ConfigError(f"context {CONTEXT_KEY!r} must be an object")
    data = _deep_merge(data, base)
    file = config_file or context.get(FILE_CONTEXT_KEY)
    if file:
        data = _deep_merge(data, read_config_file(file))
    overrides = {
        path: raw for key, raw in context.items() if (path := override_path(key)) is not None
    }
    # Sorted by path: `serving={...}` applies before `serving.port=...` refines it.
    for path, raw in sorted(overrides.items()):
        data = _deep_merge(data, _dotted_to_nested(path, _parse_override_value(raw)))
    try:
        recorded = pin_record.from_context(context)
    except pin_record.PinRecordError as err:
        raise ConfigError(str(err)) from None
    notes: dict[str, str] = {}
    if recorded is not None:
        # The recorded pins lie under every layer the operator writes: which apply depends on
        # the configuration without them (its cluster version, region, hub, plugin version).
        overlay, notes = recorded.overlay(_validated(data, for_eks=False))
        data = _deep_merge(overlay, data)
    return _validated(data, for_eks=for_eks, notes=notes)


def _validated(
    data: Mapping[str, Any], *, for_eks: bool, notes: Mapping[str, str] | None = None
) -> ExperimentConfig:
    try:
        return ExperimentConfig.model_validate(
            data, context={EKS_APP: for_eks, PIN_NOTES: dict(notes or {})}
        )
    except ValidationError as err:
        raise ConfigError(_format_validation_error(err)) from None
