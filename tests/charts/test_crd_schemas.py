"""Every custom resource the charts render passes its CRD's own openAPIV3Schema, strictly.

The CRDs are the upstream files checked in under charts/crds/ (see its README). "Strict" as
``kubectl apply --validate=strict``: an object schema that lists its properties admits no
other field (the API server would silently prune it), unless the schema preserves unknown
fields. CEL rules (``x-kubernetes-validations``) are the API server's and not evaluated here.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from workspace import PROMETHEUS_URL

from charts.gateway import gateway_manifests
from charts.inputs import ClusterInputs
from charts.probe import start_probe_manifests
from charts.rollout import rollout_manifests
from experiment import build_config

CRD_DIR = Path(__file__).resolve().parents[2] / "charts" / "crds"
CORE_GROUPS = {"", "networking.k8s.io", "rbac.authorization.k8s.io", "admissionregistration.k8s.io"}


def _strict(schema: Any) -> Any:
    if isinstance(schema, dict):
        schema = {key: _strict(value) for key, value in schema.items()}
        if (
            schema.get("type") == "object"
            and "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        if schema.get("x-kubernetes-int-or-string"):
            schema.pop("type", None)
            schema["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        return schema
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    return schema


def _load_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> the strict schema of that served version."""
    schemas = {}
    for path in sorted(CRD_DIR.glob("*.yaml")):
        for crd in yaml.safe_load_all(path.read_text()):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for version in crd["spec"]["versions"]:
                if version.get("served", True):
                    schema = _strict(version["schema"]["openAPIV3Schema"])
                    schemas[(f"{group}/{version['name']}", kind)] = schema
    return schemas


SCHEMAS = _load_schemas()


def _validate(doc: dict[str, Any]) -> None:
    schema = SCHEMAS[(doc["apiVersion"], doc["kind"])]
    body = {key: value for key, value in doc.items() if key != "metadata"}
    # metadata is the API server's ObjectMeta (validated there), not part of the CRD schema
    jsonschema.validate(body, {**schema, "properties": {
        k: v for k, v in schema.get("properties", {}).items() if k != "metadata"}})  # fmt: skip


CONFIGS = {
    "default": {},
    "plugin-profile": {"experiment.serving.profile": "new-deployment"},
    "sample-security": {"experiment.serving.security_profile": "sample"},
    "everything-baseline": {"experiment.routing.speculative_classes": "[]"},
    "no-retries": {"experiment.routing.fallback.retries": "0"},
    "floors": {"experiment.routing.acceptance_floors": '{"structured": 0.55}'},
    # The load-test alarms' CloudWatch analysis, kept for live guardrails off.
    "live-guardrails-off": {"experiment.guardrails.live.enabled": "false"},
}


def _custom_resources(overrides: dict[str, str]) -> list[dict[str, Any]]:
    config = build_config(overrides)
    return [
        doc
        for doc in [
            *gateway_manifests(config),
            *rollout_manifests(config, prometheus_url=PROMETHEUS_URL),
            # The start probe's AnalysisTemplate (a Job metric), named by the Rollout's steps.
            *start_probe_manifests(config, ClusterInputs("bucket", "image:tag")),
        ]
        if doc["apiVersion"].rsplit("/", 1)[0] not in CORE_GROUPS and "/" in doc["apiVersion"]
    ]


def test_the_checked_in_crds_cover_every_kind_rendered() -> None:
    kinds = {doc["kind"] for doc in _custom_resources({})}
    assert kinds == {
        "GatewayClass", "Gateway", "HTTPRoute", "EnvoyProxy", "Backend",
        "BackendTrafficPolicy", "AnalysisTemplate", "Rollout",
    }  # fmt: skip
    for doc in _custom_resources({}):
        assert (doc["apiVersion"], doc["kind"]) in SCHEMAS


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_custom_resource_passes_its_crd_schema(name: str) -> None:
    for doc in _custom_resources(CONFIGS[name]):
        _validate(doc)


@pytest.mark.parametrize(
    ("kind", "path", "value"),
    [
        ("HTTPRoute", ("spec", "rules", 0, "backendRef"), []),  # misspelt field
        ("HTTPRoute", ("spec", "rules", 0, "matches", 0, "headers", 0, "type"), "Exakt"),
        ("BackendTrafficPolicy", ("spec", "retry", "retryOn", "triggers"), ["5xx", "oops"]),
        ("BackendTrafficPolicy", ("spec", "healthCheck", "passive", "interval"), "1.5s"),
        ("Backend", ("spec", "fallbak"), True),
        ("EnvoyProxy", ("spec", "provider", "kubernetes", "envoyService", "nam"), "x"),
        ("EnvoyProxy", ("spec", "provider", "kubernetes", "envoyService", "name"), 1),
        ("AnalysisTemplate", ("spec", "metrics", 0, "provider", "prometheus", "querry"), "x"),
        (
            "AnalysisTemplate",
            ("spec", "metrics", 0, "provider", "prometheus", "authentication", "sigv4", "regio"),
            "x",
        ),
        ("AnalysisTemplate", ("spec", "metrics", 0, "inconclusiveLimits"), 1),
        ("EnvoyProxy", ("spec", "telemetry", "metrics", "clusterStatNames"), "x"),
        ("Rollout", ("spec", "strategy", "canary", "steps", 0, "setCanaryScale", "replica"), 1),
        ("Rollout", ("spec", "strategy", "canary", "stableSvc"), "x"),
        ("Rollout", ("spec", "template", "spec", "containers", 0, "imagePullPolicy"), 1),
    ],
)
def test_strict_validation_catches_a_bad_field(kind: str, path: tuple, value: Any) -> None:
    doc = copy.deepcopy(next(d for d in _custom_resources({}) if d["kind"] == kind))
    target: Any = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(jsonschema.ValidationError):
        _validate(doc)
