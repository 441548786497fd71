"""Prove the two arms are identical except for decoding.

``arm_asymmetries`` walks the baseline's and the speculative arm's manifests side by side
and returns every difference that is not one of the allowed ones:

- names, the arm label and the instance label/selector (each arm is its own object);
- the reference to the arm's spec ConfigMap;
- the config checksum annotation (it hashes the arm's spec);
- in the spec JSON: service name, draft model, k, speculation schedule (a k per batch size),
  speculative method, artifacts path;
- in the rendered vLLM command: only ``--speculative-config``; on the fork the
  fused-speculation key of its Neuron override JSON; on the plugin ``--no-async-scheduling``,
  the one difference vllm-neuron 1.x imposes on a speculating server; on every generation
  whose engine takes it, ``--per-request-spec-decode-metrics``, which vLLM refuses on a
  server without a drafter (ALLOWED_DIFFERENCES names each with its source). Everything
  else -- prefix caching, chunked prefill, the ``neuron_config`` JSON -- must be identical.

The same check holds the guardrail Rollout's two revisions (stable = baseline, canary =
speculative) to this rule: ``charts.rollout.revision_manifests`` gives each revision with its
Service, PDB and spec ConfigMap as one arm.

``scrape_asymmetries`` extends it to the guardrails' scrape: the collector's vLLM job makes
one target of each arm's pod, by the same rules, labelled alike but for the arm, and no other
pod (the load test, the tuning candidates) becomes an arm's target.

``fleet_asymmetries`` extends the proof to N arms (the tuning candidates of
``tuning.deploy``): each arm against the baseline, and no two arms with the same name,
artifacts path or (draft, k) -- one compile per candidate, none twice.

``python -m charts`` refuses to write manifests that fail this check.
"""

from __future__ import annotations

import itertools
import json
import re
import shlex
from collections.abc import Iterator, Mapping
from typing import Any

from charts.naming import ARM_LABEL, INSTANCE, SPEC_FILE
from charts.vllm_service import CHECKSUM_ANNOTATION, COMMAND_ANNOTATION
from runtime.render import (
    FORK_SPECULATIVE_NEURON_OVERRIDES,
    PER_REQUEST_SPEC_METRICS_FLAG,
    PLUGIN_SPECULATIVE_ONLY_FLAGS,
    per_request_spec_metrics_args,
)
from runtime.spec import Generation

SPEC_FIELDS_OF_DECODING = {
    "service_name",
    "draft_model",
    "num_speculative_tokens",
    "speculative_method",
    "speculation_schedule",  # a k per batch size: the speculative arm's decoding only
    "compiled_artifacts_path",  # one artifact set per arm (the speculative one is fused)
}
SPECULATIVE_ONLY_FLAGS = {"--speculative-config"}
# Each request's acceptance in its response: vLLM refuses the flag on a server without a
# speculative config (vllm/config/vllm.py), so only the speculative arm can carry it; it
# changes what the responses report, not how tokens are computed.
PER_REQUEST_METRICS_REASON = (
    "vLLM refuses --per-request-spec-decode-metrics without --speculative-config "
    "(vllm-project/vllm:vllm/config/vllm.py; the flag: vllm/config/observability.py, "
    "ObservabilityConfig.per_request_spec_decode_metrics): it adds each request's acceptance "
    "to the speculative arm's responses and changes no token"
)


def _speculative_only(generation: Generation) -> dict[str, str]:
    """The flags ``generation`` renders on its speculative arm only, each with its reason."""
    allowed: dict[str, str] = {}
    if generation is Generation.NEURON_PLUGIN:
        allowed |= {
            flag: (
                "vllm-neuron 1.x turns async scheduling off whenever --speculative-config is set "
                "(vllm-project/vllm-neuron:docs/guides/features-guide.md, 'Speculative "
                "decoding': mutually exclusive with async scheduling); the baseline keeps it on"
            )
            for flag in PLUGIN_SPECULATIVE_ONLY_FLAGS
        }
    if per_request_spec_metrics_args(generation):  # rendered where the engine takes it
        allowed[PER_REQUEST_SPEC_METRICS_FLAG] = PER_REQUEST_METRICS_REASON
    return allowed


# Differences a generation imposes on its speculative arm, each with its source: allowed,
# and listed so that the proof says what it tolerates instead of tolerating it silently.
ALLOWED_DIFFERENCES: dict[Generation, dict[str, str]] = {
    generation: allowed for generation in Generation if (allowed := _speculative_only(generation))
}
# Objects holding an arm's pod template: a Deployment, or one revision of the Rollout
# (charts/rollout.py ``revision_manifests``).
WORKLOAD_KINDS = {"Deployment", "Rollout"}
# Only the fork's NxD Inference override JSON carries a speculative key.
FORK_OVERRIDE_FLAG = "--override-neuron-config"

_ALLOWED_PATHS = [
    re.compile(pattern)
    for pattern in (
        r"metadata\.name",
        rf"(.*\.)?labels\.({re.escape(INSTANCE)}|{re.escape(ARM_LABEL)})",
        rf"(.*\.)?(selector|matchLabels)\.{re.escape(INSTANCE)}",
        r"spec\.selector\.matchLabels\." + re.escape(INSTANCE),
        r"spec\.template\.spec\.volumes\[spec\]\.configMap\.name",
        r"spec\.template\.metadata\.annotations\." + re.escape(CHECKSUM_ANNOTATION),
    )
]


def _key(item: Any, index: int) -> str:
    # Lists of named things (containers, volumes, env, ports) are matched by name.
    if isinstance(item, dict) and isinstance(item.get("name"), str):
        return item["name"]
    return str(index)


def diff(a: Any, b: Any, path: str = "") -> Iterator[str]:
    """Paths (dotted, list items by name) where ``a`` and ``b`` differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            child = f"{path}.{key}" if path else key
            if key not in a or key not in b:
                yield child
            else:
                yield from diff(a[key], b[key], child)
    elif isinstance(a, list) and isinstance(b, list):
        keyed_a = {_key(item, i): item for i, item in enumerate(a)}
        keyed_b = {_key(item, i): item for i, item in enumerate(b)}
        if list(keyed_a) != list(keyed_b):
            yield f"{path}[order or membership]"
            return
        for key in keyed_a:
            yield from diff(keyed_a[key], keyed_b[key], f"{path}[{key}]")
    elif a != b:
        yield path


def _allowed(path: str) -> bool:
    return any(pattern.fullmatch(path) for pattern in _ALLOWED_PATHS)


def _flags(args: list[str]) -> dict[str, str | None]:
    flags: dict[str, str | None] = {}
    for index, item in enumerate(args):
        if item.startswith("--"):
            following = args[index + 1] if index + 1 < len(args) else None
            flags[item] = following if following and not following.startswith("--") else None
    return flags


def _strip_speculative_overrides(flag: str, value: str | None) -> Any:
    if flag != FORK_OVERRIDE_FLAG or value is None:
        return value
    data = json.loads(value)
    for key in FORK_SPECULATIVE_NEURON_OVERRIDES:
        data.pop(key, None)
    return data


def allowed_differences(generation: Generation | str | None) -> dict[str, str]:
    """The flags this generation may add to the speculative arm beyond the draft itself,
    with the reason each is allowed."""
    if generation is None:
        return {}
    return ALLOWED_DIFFERENCES.get(Generation(generation), {})


def command_asymmetries(
    baseline: str, speculative: str, generation: Generation | str | None = None
) -> list[str]:
    """Differences between two rendered commands beyond the decoding flags."""
    base, spec = _flags(shlex.split(baseline)), _flags(shlex.split(speculative))
    allowed = SPECULATIVE_ONLY_FLAGS | set(allowed_differences(generation))
    problems = [f"flag {flag} only on the baseline" for flag in sorted(set(base) - set(spec))]
    for flag in sorted(set(spec) - set(base) - allowed):
        problems.append(f"flag {flag} only on the speculative arm")
    for flag in sorted(set(base) & set(spec)):
        if _strip_speculative_overrides(flag, base[flag]) != _strip_speculative_overrides(
            flag, spec[flag]
        ):
            problems.append(f"flag {flag}: {base[flag]!r} != {spec[flag]!r}")
    if not set(spec) & SPECULATIVE_ONLY_FLAGS:
        problems.append("the speculative arm's command has no --speculative-config")
    return problems


def _spec_asymmetries(base: dict[str, Any], spec: dict[str, Any]) -> list[str]:
    a, b = json.loads(base["data"][SPEC_FILE]), json.loads(spec["data"][SPEC_FILE])
    return [
        f"ConfigMap spec field {path}"
        for path in diff(a, b)
        if path.split(".")[0].split("[")[0] not in SPEC_FIELDS_OF_DECODING
    ]


def arm_asymmetries(baseline: list[dict[str, Any]], speculative: list[dict[str, Any]]) -> list[str]:
    """Every difference between the arms' manifests that is not about decoding."""
    problems: list[str] = []
    by_kind_a = {obj["kind"]: obj for obj in baseline}
    by_kind_b = {obj["kind"]: obj for obj in speculative}
    if sorted(by_kind_a) != sorted(by_kind_b) or len(by_kind_a) != len(baseline):
        return [f"object kinds differ: {sorted(by_kind_a)} vs {sorted(by_kind_b)}"]
    for kind, a in by_kind_a.items():
        b = by_kind_b[kind]
        if kind == "ConfigMap":
            problems += _spec_asymmetries(a, b)
            a = {**a, "data": None}
            b = {**b, "data": None}
        command_path = f"spec.template.metadata.annotations.{COMMAND_ANNOTATION}"
        if kind in WORKLOAD_KINDS:
            # Always compared, so that two identical commands (no draft) are caught too.
            annotations = "spec", "template", "metadata", "annotations"
            base_cmd, spec_cmd = (
                _dig(obj, annotations).get(COMMAND_ANNOTATION, "") for obj in (a, b)
            )
            generation = _spec_of(baseline).get("generation")
            found = command_asymmetries(base_cmd, spec_cmd, generation)
            problems += [f"{kind} command: {p}" for p in found]
        for path in diff(a, b):
            if path != command_path and not _allowed(path):
                problems.append(f"{kind} {path}")
    return problems


def _dig(obj: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    for key in keys:
        obj = obj[key]
    return obj


def _spec_of(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    configmap = next(obj for obj in manifests if obj["kind"] == "ConfigMap")
    return dict(json.loads(configmap["data"][SPEC_FILE]))


def fleet_asymmetries(
    baseline: list[dict[str, Any]], arms: Mapping[str, list[dict[str, Any]]]
) -> list[str]:
    """N speculative arms: each differs from the baseline only in decoding, and no two of
    them share a service name, an artifacts path or a (draft, k)."""
    problems = [
        f"{name}: {problem}"
        for name, manifests in arms.items()
        for problem in arm_asymmetries(baseline, manifests)
    ]
    seen: dict[str, dict[Any, str]] = {
        "service_name": {},
        "compiled_artifacts_path": {},
        "draft": {},
    }
    for name, manifests in arms.items():
        spec = _spec_of(manifests)
        keys = {
            "service_name": spec["service_name"],
            "compiled_artifacts_path": spec["compiled_artifacts_path"],
            "draft": (spec["draft_model"], spec["num_speculative_tokens"]),
        }
        for field, value in keys.items():
            other = seen[field].setdefault(value, name)
            if other != name:
                problems.append(f"{name} and {other} share the same {field} {value!r}")
    return problems


# The scrape: both arms are scraped alike (guardrails/scrape.py, managed collector on EKS).

POD_META = "__meta_kubernetes_pod_"


def _meta_label(label: str) -> str:
    # kubernetes_sd_config, role pod: characters not valid in a label name become '_'.
    return POD_META + "label_" + "".join(c if c.isalnum() else "_" for c in label)


def discovered_targets(pod: Mapping[str, Any], namespace: str) -> list[dict[str, str]]:
    """The targets Prometheus' Kubernetes discovery (role pod) makes of a pod: one per
    declared container port, with the pod's labels as meta labels (Prometheus docs,
    kubernetes_sd_config ``pod``)."""
    meta = pod["metadata"]
    base = {
        "__meta_kubernetes_namespace": namespace,
        POD_META + "name": meta["name"],
        **{_meta_label(key): value for key, value in meta.get("labels", {}).items()},
    }
    targets = []
    for container in pod["spec"].get("containers", []):
        for port in container.get("ports", []):
            targets.append(
                {
                    **base,
                    POD_META + "container_name": container["name"],
                    POD_META + "container_port_number": str(port["containerPort"]),
                }
            )
    return targets


def relabel(rules: list[Mapping[str, Any]], labels: Mapping[str, str]) -> dict[str, str] | None:
    """Prometheus' relabelling (``keep``, ``drop``, ``replace``; defaults regex ``(.*)``,
    separator ``;``, replacement ``$1``; regexes fully anchored): the labels after it, or
    ``None`` when the target is dropped."""
    result = dict(labels)
    for rule in rules:
        value = rule.get("separator", ";").join(result.get(s, "") for s in rule["source_labels"])
        match = re.fullmatch(rule.get("regex", "(.*)"), value)
        action = rule.get("action", "replace")
        if action == "keep" and not match:
            return None
        if action == "drop" and match:
            return None
        if action == "replace" and match:
            template = re.sub(r"\$(\d+)", r"\\\1", rule.get("replacement", "$1"))
            result[rule["target_label"]] = match.expand(template)
    return result


def _job_targets(
    job: Mapping[str, Any], pod: Mapping[str, Any], namespace: str
) -> list[dict[str, str]]:
    (discovery,) = job["kubernetes_sd_configs"]
    if namespace not in discovery.get("namespaces", {}).get("names", [namespace]):
        return []
    kept = (relabel(job["relabel_configs"], t) for t in discovered_targets(pod, namespace))
    return [
        {key: value for key, value in target.items() if not key.startswith("__")}
        for target in kept
        if target is not None
    ]


def scrape_asymmetries(
    job: Mapping[str, Any],
    arms: Mapping[str, Mapping[str, Any]],
    others: Mapping[str, Mapping[str, Any]],
    *,
    namespace: str,
    arm_label: str = "arm",
    pod_label: str = "pod",
) -> list[str]:
    """Every way the scrape job treats the arms' pods (arm value -> pod template) unlike each
    other: each arm's pod is one target, labelled with its own arm, and its labels differ
    from the other arms' in the arm (and pod name) only. No other pod (``others``: the
    load test, the tuning candidates...) may become a target of the job."""
    problems = []
    labelled: dict[str, dict[str, str]] = {}
    for arm, pod in arms.items():
        targets = _job_targets(job, pod, namespace)
        if len(targets) != 1:
            problems.append(f"arm {arm}: {len(targets)} targets of job {job['job_name']}, not 1")
            continue
        (target,) = targets
        if target.get(arm_label) != arm:
            problems.append(f"arm {arm}: scraped with {arm_label}={target.get(arm_label)!r}")
        labelled[arm] = {k: v for k, v in target.items() if k not in (arm_label, pod_label)}
    for (arm_a, a), (arm_b, b) in itertools.pairwise(labelled.items()):
        for path in diff(a, b):
            problems.append(f"arms {arm_a} and {arm_b} scraped with different label {path}")
    for name, pod in others.items():
        if _job_targets(job, pod, namespace):
            problems.append(f"{name} is scraped by job {job['job_name']} as an arm")
    return problems
