"""The cdk8s charts of the experiment, built from the one configuration.

- ``<project>-serving``: namespace, the runtime package and both arms' specs, the Neuron
  DRA claim template, the S3 model-store volumes, and ``qwen-vllm`` / ``qwen-sd-vllm``
  from the one ``VllmService`` construct (each pod precompiles its arm into the store on
  first start, then serves).
- ``<project>-loadtest``: the load-test service account and Job (depends on serving).
"""

from __future__ import annotations

from typing import Any

import cdk8s
from constructs import Construct

from charts.dra import resource_claim_template
from charts.inputs import ClusterInputs
from charts.loadtest_job import loadtest_manifests
from charts.model_store import model_store_volumes
from charts.naming import labels
from charts.network_policy import network_policies
from charts.objects import api_object
from charts.symmetry import arm_asymmetries
from charts.vllm_service import VllmService, arm_manifests, runtime_configmap
from experiment.config import Arm, ExperimentConfig

# The vLLM pods run as root (the DLC's user) but need nothing beyond that.
POD_SECURITY_LEVEL = "baseline"


class ArmsDriftError(RuntimeError):
    """The two services differ in something other than decoding."""


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
        *network_policies(config),
    ]


def check_arms(config: ExperimentConfig) -> None:
    problems = arm_asymmetries(
        arm_manifests(config, Arm.BASELINE), arm_manifests(config, Arm.SPECULATIVE)
    )
    if problems:
        raise ArmsDriftError("the two services differ beyond decoding: " + "; ".join(problems))


class ServingChart(cdk8s.Chart):
    def __init__(
        self, scope: Construct, construct_id: str, config: ExperimentConfig, inputs: ClusterInputs
    ):
        super().__init__(scope, construct_id)
        check_arms(config)
        for body in shared_manifests(config, inputs):
            api_object(self, f"{body['kind']}-{body['metadata']['name']}", body)
        self.services = {arm: VllmService(self, arm.value, config, arm) for arm in Arm}


class LoadTestChart(cdk8s.Chart):
    def __init__(
        self, scope: Construct, construct_id: str, config: ExperimentConfig, inputs: ClusterInputs
    ):
        super().__init__(scope, construct_id)
        for body in loadtest_manifests(config, inputs):
            api_object(self, body["kind"], body)


def build_charts(
    app: cdk8s.App, config: ExperimentConfig, inputs: ClusterInputs
) -> list[cdk8s.Chart]:
    """Charts in apply order; attach each with ``cluster.add_cdk8s_chart``."""
    serving = ServingChart(app, f"{config.project}-serving", config, inputs)
    loadtest = LoadTestChart(app, f"{config.project}-loadtest", config, inputs)
    loadtest.add_dependency(serving)
    return [serving, loadtest]
