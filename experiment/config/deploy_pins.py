"""The deploy pins as the configuration holds them: the Gateway API plugin's digest, the two
EKS add-on versions and a hub commit per imported checkpoint. ``pin_problems`` checks them all
at once (ExperimentConfig._deploy_pins), so one synth names every malformed one and, for a
deploy (the CDK app, the kubectl path), every missing one; ``python -m experiment pins``
resolves them (experiment/pins/)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from experiment.config.addons import (
    ADDON_VERSION,
    PINNED_ADDONS,
    POD_IDENTITY_MINIMUM,
    addon_release,
    addon_version_malformed,
    addon_version_missing,
    addon_version_too_old,
)
from experiment.config.gateway_plugin import DIGEST_MISSING, SHA256_HEX, sha256_malformed
from experiment.config.model_store import HUB_COMMIT, hub_revisions_missing

# Validation context: config key -> why the pin recorded in cdk.context.json for it does not
# apply (experiment/pins/record.py); said with that key when the pin is missing.
PIN_NOTES = "pin_notes"
# The error type of a missing or malformed deploy pin: experiment/loading.py adds the hint.
PIN_ERROR = "deploy_pin"


def pin_problems(config: Any, deploy: bool, notes: Mapping[str, str]) -> list[tuple[str, str]]:
    """(key, what to change) of every malformed deploy pin of an ExperimentConfig and, for a
    deploy, every missing one."""
    problems: list[tuple[str, str]] = []

    def missing(key: str, message: str) -> None:
        if deploy:
            note = notes.get(key)
            problems.append((key, f"{note}; {message}" if note else message))

    digest_key = "routing.eks.gateway_api_plugin_sha256"
    digest = config.routing.eks.gateway_api_plugin_sha256
    if digest is None:
        missing(digest_key, DIGEST_MISSING)
    elif not SHA256_HEX.fullmatch(digest):
        problems.append((digest_key, sha256_malformed(digest)))
    cluster = config.cluster
    for addon, field in PINNED_ADDONS.items():
        key, version = f"cluster.{field}", getattr(cluster, field)
        if version is None:
            missing(key, addon_version_missing(addon, key, cluster.kubernetes_version))
        elif not ADDON_VERSION.fullmatch(version):
            problems.append((key, addon_version_malformed(key, version)))
        elif addon_release(version) < POD_IDENTITY_MINIMUM[addon]:
            problems.append((key, addon_version_too_old(addon, key, version)))
    # Every checkpoint the import Job pulls is pinned to a commit, as the plugin binary is to a
    # digest: the calendar's hub rows (eagle3-drafter, hub-checkpoints).
    store = config.model_store
    if store.import_checkpoints:
        unpinned = [
            model
            for model in config.hub_models()
            if not HUB_COMMIT.fullmatch(store.hub_revisions.get(model, ""))
        ]
        if unpinned:
            missing(HUB_KEY, hub_revisions_missing(unpinned, store.hub_endpoint))
    return problems


HUB_KEY = "model_store.hub_revisions"
