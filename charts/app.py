"""The cdk8s charts of the experiment, built from the one configuration.

- ``<project>-serving``: namespace, the runtime package and both arms' specs, the Neuron
  DRA claim template, the S3 model-store volumes, the model-import Job (checkpoints from the
  hub; ``charts/model_import_job.py``), and the Services ``qwen-vllm`` / ``qwen-sd-vllm`` with
  their PDBs (each pod waits for its models, precompiles its arm into the store on first
  start, then serves). With ``tuning.deploy`` the ``VllmService`` construct makes one
  Deployment per tuning candidate (draft, k), each with its own fingerprinted artifacts path.
- ``<project>-loadtest``: the load-test service account and Job (depends on serving), and
  the guardrail probe's CronJob and Pushgateway (``charts/probe.py``).
- ``<project>-routing``: the tiered-routing gateway and the guardrail rollback: its analysis,
  RBAC and the Rollout whose stable and canary revisions are the baseline and speculative
  pods (``charts/gateway.py``, ``charts/rollout.py``; depends on serving).
"""

from __future__ import annotations

import re
from typing import Any

import cdk8s
from constructs import Construct

from charts.dra import resource_claim_template
from charts.gateway import gateway_manifests
from charts.inputs import ClusterInputs
from charts.loadtest_job import loadtest_manifests
from charts.model_import_job import model_import_manifests
from charts.model_store import model_store_volumes
from charts.naming import labels
from charts.network_policy import network_policies
from charts.objects import api_object
from charts.probe import probe_manifests, start_probe_manifests
from charts.rollout import (
    check_prometheus_url,
    managed_scrape_config,
    revision_manifests,
    revision_template,
    rollout_arm_manifests,
    rollout_manifests,
    rollout_name,
)
from charts.symmetry import arm_asymmetries, fleet_asymmetries, scrape_asymmetries
from charts.vllm_service import arm_manifests, runtime_configmap
from experiment.config import Arm, ExperimentConfig
from experiment.loading import ConfigError
from guardrails.rules import jobs
from runtime.artifacts import compile_fingerprint

# The vLLM pods run as root (the DLC's user) but need nothing beyond that.
POD_SECURITY_LEVEL = "baseline"


class ArmsDriftError(RuntimeError):
    """The two services differ in something other than decoding."""


# Kubernetes Service names are DNS-1035 labels.
_DNS_1035 = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
FINGERPRINT_CHARS = 8


def candidate_service_name(config: ExperimentConfig, draft: str, k: int) -> str:
    """``<speculative_service>-<draft>-k<k>-<fingerprint>``: the compile fingerprint in the
    name puts it in the artifacts path (compiled/<service>), so a changed setting compiles
    into a new path and an unchanged one is found again, never compiled twice."""
    stem = config.serving.speculative_service
    spec = config.with_speculative(draft, k, stem).serving_spec(Arm.SPECULATIVE)
    slug = re.sub(r"[^a-z0-9]+", "-", draft.rsplit("/", 1)[-1].lower()).strip("-")
    name = f"{stem}-{slug}-k{k}-{compile_fingerprint(spec)[:FINGERPRINT_CHARS]}"
    if not _DNS_1035.fullmatch(name):
        raise ConfigError(
            f"tuning candidate {draft} k={k} gives the service name {name!r}, not a valid "
            "Kubernetes name (63 lowercase characters at most); shorten "
            "serving.speculative_service"
        )
    return name


def candidate_configs(config: ExperimentConfig) -> dict[str, ExperimentConfig]:
    """One configuration per tuning candidate when ``tuning.deploy`` is on, by service name
    (ExperimentConfig.deployed_candidates)."""
    if not config.tuning.deploy:
        return {}
    candidates = {}
    for draft, k in config.deployed_candidates():
        name = candidate_service_name(config, draft, k)
        candidates[name] = config.with_speculative(draft, k, name)
    check_capacity(config)
    return candidates


def check_capacity(config: ExperimentConfig) -> None:
    """Every arm runs at once: the Neuron node group must hold them all."""
    nodes = config.cluster.neuron_nodes
    arms = 2 + len(config.deployed_candidates())
    per_node = nodes.devices // config.serving.neuron_devices
    needed = config.neuron_nodes_for_arms()
    if needed > nodes.max_size:
        raise ConfigError(
            f"tuning.deploy: {arms} arms x {config.serving.neuron_devices} devices need "
            f"{needed} {nodes.instance_type} nodes ({per_node} arms per node) but "
            f"cluster.neuron_nodes.max_size is {nodes.max_size}; raise max_size to {needed} "
            "or deploy fewer candidates (tuning.drafts, tuning.holdout_k)"
        )


def namespace(config: ExperimentConfig) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": config.serving.namespace,
            "labels": {
                **labels(config, "namespace", config.serving.namespace),
                "pod-security.kubernetes.io/enforce": POD_SECURITY_LEVEL,
            },
        },
    }


def shared_manifests(config: ExperimentConfig, inputs: ClusterInputs) -> list[dict[str, Any]]:
    return [
        namespace(config),
        runtime_configmap(config),
        resource_claim_template(config),
        *model_store_volumes(config, inputs),
        *network_policies(config, inputs),
        *model_import_manifests(config, inputs.bucket_name),
    ]


def check_arms(config: ExperimentConfig) -> None:
    revisions = [revision_manifests(config, arm) for arm in (Arm.BASELINE, Arm.SPECULATIVE)]
    problems = arm_asymmetries(*revisions)
    if problems:
        raise ArmsDriftError(
            "the Rollout's two revisions differ beyond decoding: " + "; ".join(problems)
        )
    baseline = arm_manifests(config, Arm.BASELINE)
    problems = arm_asymmetries(baseline, arm_manifests(config, Arm.SPECULATIVE))
    if problems:
        raise ArmsDriftError("the two services differ beyond decoding: " + "; ".join(problems))
    arms = {config.serving.speculative_service: arm_manifests(config, Arm.SPECULATIVE)}
    for name, candidate in candidate_configs(config).items():
        arms[name] = arm_manifests(candidate, Arm.SPECULATIVE)
    problems = fleet_asymmetries(baseline, arms)
    if problems:
        raise ArmsDriftError("the arms differ beyond decoding: " + "; ".join(problems))


WORKLOAD_KINDS = ("Deployment", "Job", "StatefulSet", "DaemonSet")


def _pod(template: dict[str, Any], name: str) -> dict[str, Any]:
    return {"metadata": {**template["metadata"], "name": name}, "spec": template["spec"]}


def check_scrape(config: ExperimentConfig, inputs: ClusterInputs) -> None:
    """The collector's vLLM job scrapes both arms alike and no other pod of ours as an arm
    (``charts.symmetry.scrape_asymmetries``); only with live guardrails."""
    if not config.guardrails.live.enabled:
        return
    scrape = managed_scrape_config(config)
    (job,) = (j for j in scrape["scrape_configs"] if j["job_name"] == jobs(config)["vllm"])
    arms = {
        arm.value: _pod(revision_template(config, arm), f"{rollout_name(config)}-{arm.value}")
        for arm in Arm
    }
    workloads = [*shared_manifests(config, inputs), *loadtest_manifests(config, inputs)]
    for candidate in candidate_configs(config).values():
        workloads += arm_manifests(candidate, Arm.SPECULATIVE)
    others = {
        f"{body['kind']} {body['metadata']['name']}": _pod(
            body["spec"]["template"], body["metadata"]["name"]
        )
        for body in workloads
        if body["kind"] in WORKLOAD_KINDS
    }
    problems = scrape_asymmetries(job, arms, others, namespace=config.serving.namespace)
    if problems:
        raise ArmsDriftError("the guardrail scrape treats the arms unalike: " + "; ".join(problems))


class VllmService(Construct):
    """One arm: its spec ConfigMap, Deployment, Service and PodDisruptionBudget."""

    def __init__(self, scope: Construct, construct_id: str, config: ExperimentConfig, arm: Arm):
        super().__init__(scope, construct_id)
        self.arm = arm
        self.manifests = arm_manifests(config, arm)
        for body in self.manifests:
            api_object(self, body["kind"], body)


class ServingChart(cdk8s.Chart):
    def __init__(
        self, scope: Construct, construct_id: str, config: ExperimentConfig, inputs: ClusterInputs
    ):
        super().__init__(scope, construct_id)
        check_arms(config)
        for body in shared_manifests(config, inputs):
            api_object(self, f"{body['kind']}-{body['metadata']['name']}", body)
        # The two arms' pods are the Rollout's revisions (routing chart, charts/rollout.py);
        # their spec ConfigMaps, Services and PDBs are here, applied before it.
        for arm in Arm:
            for body in rollout_arm_manifests(config, arm):
                api_object(self, f"{body['kind']}-{body['metadata']['name']}", body)
        self.candidates = {
            name: VllmService(self, name, candidate, Arm.SPECULATIVE)
            for name, candidate in candidate_configs(config).items()
        }


class LoadTestChart(cdk8s.Chart):
    def __init__(
        self, scope: Construct, construct_id: str, config: ExperimentConfig, inputs: ClusterInputs
    ):
        super().__init__(scope, construct_id)
        # The guardrail probe runs the load-test image with its config (charts/probe.py).
        for body in [*loadtest_manifests(config, inputs), *probe_manifests(config, inputs)]:
            api_object(self, f"{body['kind']}-{body['metadata']['name']}", body)


class RoutingChart(cdk8s.Chart):
    def __init__(
        self, scope: Construct, construct_id: str, config: ExperimentConfig, inputs: ClusterInputs
    ):
        super().__init__(scope, construct_id)
        rollouts = rollout_manifests(config, prometheus_url=inputs.prometheus_url)
        start_probe = start_probe_manifests(config, inputs)  # named by the Rollout's steps
        for body in [*gateway_manifests(config), *start_probe, *rollouts]:
            api_object(self, f"{body['kind']}-{body['metadata']['name']}", body)


def build_charts(
    app: cdk8s.App, config: ExperimentConfig, inputs: ClusterInputs
) -> list[cdk8s.Chart]:
    """Charts in apply order; attach each with ``cluster.add_cdk8s_chart``."""
    check_prometheus_url(config, inputs.prometheus_url)  # before any chart exists
    check_scrape(config, inputs)
    serving = ServingChart(app, f"{config.project}-serving", config, inputs)
    loadtest = LoadTestChart(app, f"{config.project}-loadtest", config, inputs)
    routing = RoutingChart(app, f"{config.project}-routing", config, inputs)
    routing.add_dependency(serving)
    loadtest.add_dependency(serving)
    loadtest.add_dependency(routing)  # the arms' pods are the routing chart's Rollout
    return [serving, loadtest, routing]
