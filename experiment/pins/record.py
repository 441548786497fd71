"""The deploy pins as recorded in ``cdk.context.json``: their shape, how they layer under the
configuration, and how the file is read and written.

``cdk.context.json`` is CDK's own file for values resolved once and then frozen ("the CDK
records ... in your project's cdk.context.json file, and uses the stored value for future
synthesis operations"; awsdocs/aws-cdk-guide v2/context.md); the CDK CLI hands its keys to
the app as context, as it does cdk.json's, so ``cdk synth`` reads the record under
``PINS_KEY`` (the kubectl path, ``python -m charts``, reads the file itself). It is committed
and reviewed like code; ``python -m experiment pins --refresh`` re-resolves it, and ``cdk
context --clear`` drops it with CDK's cached lookups.

The record says where each value came from and what it was resolved for (the plugin version,
the cluster's Kubernetes version and region, the hub), so a pin resolved for another cluster
is not applied but named when synth asks for it.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from experiment.config import ExperimentConfig
from experiment.config.addons import ADDON_VERSION, PINNED_ADDONS
from experiment.config.gateway_plugin import (
    GATEWAY_API_PLUGIN_ASSET,
    GATEWAY_API_PLUGIN_VERSION,
    SHA256_HEX,
)
from experiment.config.model_store import HUB_COMMIT

PINS_KEY = "experiment:pins"  # no '.': never read as a dotted config override
CONTEXT_FILE = "cdk.context.json"
REFRESH_HINT = (
    "resolve it again with `python -m experiment pins --refresh` (make pins PINS_ARGS=--refresh)"
)
HUB_KEY = "model_store.hub_revisions"
DIGEST_KEY = "routing.eks.gateway_api_plugin_sha256"
# How the plugin's digest was obtained: the release API's assets[].digest, or a download.
DigestMethod = Literal["release-api-digest", "downloaded-and-hashed"]


class PinRecordError(ValueError):
    """cdk.context.json or its pins cannot be used; the message names the key to change."""


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HubCommit(_Record):
    commit: str = Field(description="40 lower-case hex digits: the hub's 'sha' of a revision")
    source: str

    @field_validator("commit")
    @classmethod
    def _commit(cls, value: str) -> str:
        if not HUB_COMMIT.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a commit (40 lower-case hex digits); a branch or tag moves"
            )
        return value


class HubPins(_Record):
    endpoint: str
    revisions: dict[str, HubCommit]


class PluginPin(_Record):
    version: str
    asset: str
    sha256: str
    method: DigestMethod
    source: str

    @field_validator("sha256")
    @classmethod
    def _sha256(cls, value: str) -> str:
        if not SHA256_HEX.fullmatch(value):
            raise ValueError(f"{value!r} is not a SHA-256 of 64 lower-case hex digits")
        return value


class AddonPin(_Record):
    version: str
    source: str

    @field_validator("version")
    @classmethod
    def _version(cls, value: str) -> str:
        if not ADDON_VERSION.fullmatch(value):
            raise ValueError(
                f"{value!r} is not an EKS add-on version of the form vX.Y.Z-eksbuild.N"
            )
        return value


class AddonPins(_Record):
    kubernetes_version: str
    region: str
    versions: dict[str, AddonPin]

    @field_validator("versions")
    @classmethod
    def _known(cls, value: dict[str, AddonPin]) -> dict[str, AddonPin]:
        unknown = sorted(set(value) - set(PINNED_ADDONS))
        if unknown:
            raise ValueError(f"{unknown} are not pinned add-ons; they are {sorted(PINNED_ADDONS)}")
        return value


class PinRecord(_Record):
    """The value of ``PINS_KEY`` in cdk.context.json."""

    hub: HubPins | None = None
    gateway_api_plugin: PluginPin | None = None
    eks_addons: AddonPins | None = None

    def overlay(self, config: ExperimentConfig) -> tuple[dict[str, Any], dict[str, str]]:
        """The recorded pins that apply to ``config``, as config data to layer under it, and
        for each pin that does not apply, why (config key -> note)."""
        data: dict[str, Any] = {}
        notes: dict[str, str] = {}
        where = f"{CONTEXT_FILE} {PINS_KEY!r}"
        if self.hub is not None:
            endpoint = config.model_store.hub_endpoint
            if self.hub.endpoint == endpoint:
                revisions = {model: pin.commit for model, pin in self.hub.revisions.items()}
                data["model_store"] = {"hub_revisions": revisions}
            else:
                notes[HUB_KEY] = (
                    f"{where} holds commits of {self.hub.endpoint}, not of "
                    f"model_store.hub_endpoint {endpoint}: {REFRESH_HINT}"
                )
        plugin = self.gateway_api_plugin
        if plugin is not None:
            wanted = (GATEWAY_API_PLUGIN_VERSION, GATEWAY_API_PLUGIN_ASSET)
            if (plugin.version, plugin.asset) == wanted:
                data["routing"] = {"eks": {"gateway_api_plugin_sha256": plugin.sha256}}
            else:
                notes[DIGEST_KEY] = (
                    f"{where} holds the digest of {plugin.asset} {plugin.version}, and the "
                    f"cluster installs {wanted[1]} {wanted[0]}: {REFRESH_HINT}"
                )
        addons = self.eks_addons
        if addons is not None:
            cluster = config.cluster
            for_this = (addons.kubernetes_version, addons.region) == (
                cluster.kubernetes_version,
                config.region,
            )
            for addon, field in PINNED_ADDONS.items():
                pin = addons.versions.get(addon)
                if pin is not None and for_this:
                    data.setdefault("cluster", {})[field] = pin.version
                elif pin is not None:
                    notes[f"cluster.{field}"] = (
                        f"{where} pins {addon} for Kubernetes {addons.kubernetes_version} in "
                        f"{addons.region}, and cluster.kubernetes_version is "
                        f"{cluster.kubernetes_version} in {config.region}: {REFRESH_HINT}"
                    )
        return data, notes

    def as_context(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


def _located(err: ValidationError) -> str:
    lines = []
    for problem in err.errors():
        key = ".".join([PINS_KEY, *(str(part) for part in problem["loc"])])
        message = problem["msg"].removeprefix("Value error, ")
        if problem["type"] == "extra_forbidden":
            message = "unknown key"
        lines.append(f"  - {key}: {message}")
    return "\n".join(lines)


def parse(value: Any) -> PinRecord:
    """The record from a context value; anything else is refused naming the key."""
    if not isinstance(value, Mapping):
        raise PinRecordError(
            f"{CONTEXT_FILE}: {PINS_KEY!r} is {type(value).__name__}, not the object `make pins` "
            f"writes; {REFRESH_HINT}"
        )
    try:
        return PinRecord.model_validate(dict(value))
    except ValidationError as err:
        raise PinRecordError(
            f"{CONTEXT_FILE}: the recorded deploy pins are not usable; {REFRESH_HINT} (it "
            f"replaces {PINS_KEY!r}) or fix:\n{_located(err)}"
        ) from None


def from_context(context: Mapping[str, Any]) -> PinRecord | None:
    return parse(context[PINS_KEY]) if PINS_KEY in context else None


def read_file(path: Path) -> dict[str, Any]:
    """cdk.context.json as an object ({} when absent); other content is refused naming it."""
    if not path.is_file():
        return {}
    try:
        content = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise PinRecordError(
            f"{path.name} is not JSON ({err}): fix it or delete it (it holds CDK's cached "
            "lookups and the deploy pins; `make pins` writes the pins again)"
        ) from None
    if not isinstance(content, dict):
        raise PinRecordError(
            f"{path.name} holds a {type(content).__name__}, not the JSON object CDK and `make "
            "pins` write: fix it or delete it"
        )
    return content


def context_entries(path: Path) -> dict[str, Any]:
    """The pins entry of cdk.context.json, as context ({} when it has none)."""
    content = read_file(path)
    return {PINS_KEY: content[PINS_KEY]} if PINS_KEY in content else {}


def write_file(path: Path, record: PinRecord) -> None:
    """Replace the pins in ``path`` and keep every other key (CDK's cached lookups); written
    whole to a temporary file first, so a failure leaves the old file as it was."""
    content = read_file(path)
    content[PINS_KEY] = record.as_context()
    text = json.dumps(content, indent=2, sort_keys=True) + "\n"
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "w") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
