"""``python -m experiment pins``: resolve every deploy pin in one run and record them in
cdk.context.json, where ``cdk synth`` (and ``python -m charts``) read them.

- without flags: resolves the pins this configuration needs that are not recorded yet (or
  were recorded for another cluster version, region, hub or plugin release) and keeps the
  others; ``--refresh`` resolves every one again;
- ``--check``: asks upstream whether every recorded pin still exists; writes nothing.

Nothing is written unless every pin resolved: offline or without AWS credentials it says what
it could not reach and exits 1. Needs the network (the hub, api.github.com) and AWS
credentials for EKS DescribeAddonVersions in the configured region.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from experiment.config import ExperimentConfig
from experiment.config.addons import PINNED_ADDONS
from experiment.config.gateway_plugin import (
    GATEWAY_API_PLUGIN_ASSET,
    GATEWAY_API_PLUGIN_REPO,
    GATEWAY_API_PLUGIN_VERSION,
)
from experiment.loading import (
    PROJECT_ROOT,
    ConfigError,
    add_config_arguments,
    build_config,
    cdk_json_context,
    context_from_pairs,
)
from experiment.pins import record as pins
from experiment.pins import resolve
from experiment.pins.record import AddonPins, HubPins, PinRecord

EXIT_UNRESOLVED = 1
EXIT_BAD_INPUT = 2
EksClient = Callable[[str], Any]  # region -> boto3 EKS client
_T = TypeVar("_T")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--refresh", action="store_true", help="resolve every pin again")
    mode.add_argument(
        "--check", action="store_true", help="check the recorded pins still exist; write nothing"
    )
    parser.add_argument(
        "--download",
        action="store_true",
        help="hash the downloaded plugin asset too (it must equal the release API's digest)",
    )
    parser.add_argument(
        "--context-file",
        type=Path,
        default=PROJECT_ROOT / pins.CONTEXT_FILE,
        help="the CDK context file to write (default: cdk.context.json next to cdk.json)",
    )
    parser.add_argument("--github-api", default=resolve.GITHUB_API, help="GitHub REST API base URL")
    parser.add_argument(
        "--hub-api",
        help="where to ask the hub API (a mirror or proxy of it; default: model_store."
        "hub_endpoint, which the commits are recorded for)",
    )


def default_eks_client(region: str) -> Any:
    import boto3
    from botocore.config import Config

    config = Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=10)
    return boto3.client("eks", region_name=region, config=config)


@dataclass
class _Run:
    lines: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def attempt(self, action: Callable[..., _T], *args: Any, **kwargs: Any) -> _T | None:
        try:
            return action(*args, **kwargs)
        except resolve.Unreachable as err:
            self.failures.append(str(err))
            return None


def run(args: argparse.Namespace, eks_client: EksClient = default_eks_client) -> int:
    try:
        # The configuration without any recorded pin: it says which pins a deploy needs.
        context = {**cdk_json_context(), **context_from_pairs(args.overrides or [])}
        config = build_config(context, config_file=args.config)
        content = pins.read_file(args.context_file)
        recorded = None
        if pins.PINS_KEY in content:
            try:
                recorded = pins.parse(content[pins.PINS_KEY])
            except pins.PinRecordError:
                if not args.refresh and not args.check:
                    raise
    except (ConfigError, pins.PinRecordError) as err:
        print(f"pins: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.check:
        return _check(config, recorded, args, eks_client)
    return _resolve(config, recorded, args, eks_client)


def _needed_models(config: ExperimentConfig) -> list[str]:
    return config.hub_models() if config.model_store.import_checkpoints else []


def _resolve(
    config: ExperimentConfig, recorded: PinRecord | None, args: Any, eks_client: EksClient
) -> int:
    run, keep = _Run(), None if args.refresh else recorded
    endpoint, kubernetes, region = (
        config.model_store.hub_endpoint,
        config.cluster.kubernetes_version,
        config.region,
    )
    # The hub: one commit per imported model, kept when recorded for this hub.
    same_hub = keep is not None and keep.hub is not None and keep.hub.endpoint == endpoint
    revisions = dict(keep.hub.revisions) if same_hub and keep and keep.hub else {}
    for model in _needed_models(config):
        if model in revisions:
            run.lines.append(_line(f'hub_revisions["{model}"]', revisions[model].commit, "kept"))
            continue
        commit = run.attempt(resolve.hub_commit, args.hub_api or endpoint, model)
        if commit is not None:
            revisions[model] = commit
            run.lines.append(_line(f'hub_revisions["{model}"]', commit.commit, commit.source))
    # The plugin's digest, kept when recorded for the release the cluster installs.
    plugin = keep.gateway_api_plugin if keep else None
    if plugin is not None and (plugin.version, plugin.asset) == (
        GATEWAY_API_PLUGIN_VERSION,
        GATEWAY_API_PLUGIN_ASSET,
    ):
        run.lines.append(_line("gateway_api_plugin_sha256", plugin.sha256, "kept"))
    else:
        plugin = run.attempt(
            resolve.plugin_digest,
            args.github_api,
            GATEWAY_API_PLUGIN_REPO,
            GATEWAY_API_PLUGIN_VERSION,
            GATEWAY_API_PLUGIN_ASSET,
            download=args.download,
        )
        if plugin is not None:
            run.lines.append(_line("gateway_api_plugin_sha256", plugin.sha256, plugin.source))
    # The add-ons: the default version for this cluster version, in this region.
    addons = keep.eks_addons if keep else None
    versions = (
        dict(addons.versions)
        if addons and (addons.kubernetes_version, addons.region) == (kubernetes, region)
        else {}
    )
    client = None
    for addon, setting in PINNED_ADDONS.items():
        if addon in versions:
            run.lines.append(_line(setting, versions[addon].version, "kept"))
            continue
        client = client or eks_client(region)
        default = run.attempt(resolve.addon_default, client, addon, kubernetes)
        if default is not None:
            versions[addon] = default
            run.lines.append(_line(setting, default.version, default.source))
    if run.failures:
        print("pins: could not resolve every pin; nothing written:", file=sys.stderr)
        for failure in run.failures:
            print(f"  - {failure}", file=sys.stderr)
        return EXIT_UNRESOLVED
    new = PinRecord(
        hub=HubPins(endpoint=endpoint, revisions=revisions) if revisions else None,
        gateway_api_plugin=plugin,
        eks_addons=AddonPins(kubernetes_version=kubernetes, region=region, versions=versions),
    )
    try:
        pins.write_file(args.context_file, new)
    except (OSError, pins.PinRecordError) as err:
        print(f"pins: could not write {args.context_file}: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print("\n".join(run.lines))
    print(
        f"wrote {pins.PINS_KEY!r} to {args.context_file.name} (Kubernetes {kubernetes}, "
        f"{region}); make synth and python -m charts read it"
    )
    for note in _overridden(config):
        print(f"note: {note}")
    return 0


def _line(setting: str, value: str, source: str) -> str:
    return f"{setting} = {value}\n    source: {source}"


def _overridden(config: ExperimentConfig) -> list[str]:
    """Pins the configuration itself sets: they win over the recorded ones."""
    notes = []
    if config.routing.eks.gateway_api_plugin_sha256 is not None:
        notes.append("routing.eks.gateway_api_plugin_sha256 is set in the configuration")
    for setting in PINNED_ADDONS.values():
        if getattr(config.cluster, setting) is not None:
            notes.append(f"cluster.{setting} is set in the configuration")
    set_models = sorted(set(config.model_store.hub_revisions) & set(_needed_models(config)))
    if set_models:
        notes.append(f"model_store.hub_revisions sets {set_models} in the configuration")
    return [f"{note}: it overrides the recorded pin; remove it to use the record" for note in notes]


def _check(
    config: ExperimentConfig, recorded: PinRecord | None, args: Any, eks_client: EksClient
) -> int:
    if recorded is None:
        print(
            f"pins: {args.context_file.name} records no deploy pins ({pins.PINS_KEY!r}, or "
            "unusable): run `make pins`",
            file=sys.stderr,
        )
        return EXIT_UNRESOLVED
    run = _Run()
    _, notes = recorded.overlay(config)
    run.failures += [f"{key}: {note}" for key, note in sorted(notes.items())]
    if recorded.hub is not None:
        hub = recorded.hub
        for model, pin in sorted(hub.revisions.items()):
            found = run.attempt(
                resolve.check_hub_commit, args.hub_api or hub.endpoint, model, pin.commit
            )
            if found:
                run.lines.append(found)
    missing = [m for m in _needed_models(config) if not hub_has(recorded, m)]
    run.failures += [f"no commit recorded for {model}" for model in missing]
    plugin = recorded.gateway_api_plugin
    if plugin is None:
        run.failures.append("no plugin digest recorded")
    else:
        found = run.attempt(
            resolve.check_plugin_digest,
            args.github_api,
            plugin,
            GATEWAY_API_PLUGIN_REPO,
            download=args.download,
        )
        if found:
            run.lines.append(found)
    addons = recorded.eks_addons
    if addons is None or set(addons.versions) != set(PINNED_ADDONS):
        run.failures.append(f"add-on versions not all recorded ({sorted(PINNED_ADDONS)})")
    if addons is not None:
        client = eks_client(addons.region)
        for addon in (a for a in PINNED_ADDONS if a in addons.versions):
            addon_pin = addons.versions[addon]
            found = run.attempt(
                resolve.check_addon, client, addon, addons.kubernetes_version, addon_pin.version
            )
            if found:
                run.lines.append(found)
    for line in run.lines:
        print(f"ok: {line}")
    for failure in run.failures:
        print(f"FAILED: {failure}")
    if run.failures:
        print(f"pins: some recorded pins do not hold; {pins.REFRESH_HINT}", file=sys.stderr)
        return EXIT_UNRESOLVED
    return 0


def hub_has(recorded: PinRecord, model: str) -> bool:
    return recorded.hub is not None and model in recorded.hub.revisions
