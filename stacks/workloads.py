"""The Kubernetes side of the experiment: the load-test image and the cdk8s charts.

``charts.build_charts`` (owned by charts/) turns the same config into the DRA claim, the S3
PV/PVC, the two vLLM services, the precompile Jobs and the load-test Job; each chart is
applied through the cluster's kubectl provider after the add-ons and the DRA driver.
"""

from __future__ import annotations

from typing import cast

import aws_cdk as cdk
import cdk8s
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from experiment import ExperimentConfig
from experiment.loading import PROJECT_ROOT

# The image context is the repository root, but only what the load test imports enters it
# (never .venv, .cache, cdk.out, runs/...); README.md because pyproject.toml names it.
# guardrails: the probe's series names and job (python -m loadtest probe).
LOADTEST_CONTEXT_INCLUDES = (
    "pyproject.toml", "README.md", "experiment", "runtime", "guardrails", "loadtest",
)  # fmt: skip
LOADTEST_CONTEXT_EXCLUDE = [
    "*",
    *(f"!{path}" for path in LOADTEST_CONTEXT_INCLUDES),
    "**/__pycache__",
    "**/*.pyc",
]


def loadtest_image(scope: Construct, config: ExperimentConfig) -> ecr_assets.DockerImageAsset:
    return ecr_assets.DockerImageAsset(
        scope,
        "LoadTestImage",
        directory=str(PROJECT_ROOT),
        file=f"{config.loadtest.image_directory}/Dockerfile",
        exclude=LOADTEST_CONTEXT_EXCLUDE,
        ignore_mode=cdk.IgnoreMode.DOCKER,
        platform=ecr_assets.Platform.LINUX_AMD64,  # the system nodes are x86_64
    )


def add_experiment_charts(
    cluster: eks.Cluster,
    config: ExperimentConfig,
    *,
    bucket_name: str,
    loadtest_image_uri: str,
    prerequisites: list[Construct],
    prometheus_url: str | None = None,
) -> list[eks.KubernetesManifest]:
    import charts  # imported here: charts/ is written separately and pulls in cdk8s imports

    chart_app = cdk8s.App()
    inputs = charts.ClusterInputs(
        bucket_name=bucket_name,
        loadtest_image=loadtest_image_uri,
        prometheus_url=prometheus_url,
        # The managed collector's subnets: the Pushgateway admits its scrapes from them.
        private_subnet_cidrs=tuple(s.ipv4_cidr_block for s in cluster.vpc.private_subnets),
    )
    manifests = {}
    for chart in charts.build_charts(chart_app, config, inputs):
        manifest = cluster.add_cdk8s_chart(f"Chart-{chart.node.id}", chart)
        for prerequisite in prerequisites:
            manifest.node.add_dependency(prerequisite)
        manifests[chart.node.id] = manifest
    # Apply the manifests in the order of the charts' dependencies.
    for chart in chart_app.charts:
        for dependency in chart.node.dependencies:
            manifests[chart.node.id].node.add_dependency(manifests[dependency.node.id])
    add_canary_revision(cluster, config, manifests[f"{config.project}-routing"])
    return list(manifests.values())


def add_canary_revision(
    cluster: eks.Cluster, config: ExperimentConfig, routing: eks.KubernetesManifest
) -> eks.KubernetesPatch:
    """Turn the Rollout's template into the speculative revision once the baseline is stable.

    Argo promotes a Rollout's first revision straight to stable, without steps ("Initial
    deploy": argo-rollouts v1.9.1 rollout/sync.go shouldFullPromote, when no stable
    ReplicaSet exists; it does not wait for the pods). The routing chart creates the Rollout
    with the baseline template; a KubernetesObjectValue waits until ``.status.stableRS`` is
    set (the baseline is stable); only then does a KubernetesPatch merge the speculative
    template over it, which Argo runs as the canary through the steps. Patched before that,
    the speculative template would itself become the stable revision.

    Later deploys rely on how aws-cdk-lib's kubectl handler applies (2.275.0,
    custom-resource-handlers aws-eks-v2/kubectl-handler): a chart is created with ``kubectl
    create --save-config`` and updated with client-side ``kubectl apply --prune``, so an
    unchanged Rollout in an updated chart is not patched back to the baseline, and a Rollout
    renamed for a new baseline replaces the old one, which is pruned. The value polls
    ``kubectl get -o jsonpath`` every 10 s until it is non-empty; the patch runs ``kubectl
    patch --type merge`` on create and update, and its restore patch on delete."""
    from charts.rollout import (
        ROLLOUTS_API,
        STABLE_REVISION_FIELD,
        canary_patches,
        canary_start_message,
        rollout_name,
    )

    name = rollout_name(config)
    kind = f"rollout.{ROLLOUTS_API.split('/')[0]}"
    # jsii's Python Cluster lacks a property of its own ICluster protocol
    cluster_ref = cast(eks.ICluster, cluster)
    # Scoped to the cluster, not the manifest: a dependency on a construct covers its children.
    stable = eks.KubernetesObjectValue(
        cluster,
        "RolloutBaselineStable",
        cluster=cluster_ref,
        object_type=kind,
        object_name=name,
        object_namespace=config.serving.namespace,
        json_path=STABLE_REVISION_FIELD,
        timeout=cdk.Duration.minutes(config.routing.eks.initial_revision_timeout_minutes),
    )
    stable.node.add_dependency(routing)
    apply, restore = canary_patches(config)
    patch = eks.KubernetesPatch(
        cluster,
        "RolloutSpeculativeCanary",
        cluster=cluster_ref,
        resource_name=f"{kind}/{name}",
        resource_namespace=config.serving.namespace,
        apply_patch=apply,
        restore_patch=restore,
        patch_type=eks.PatchType.MERGE,  # CRDs take no strategic merge patch
    )
    patch.node.add_dependency(stable)
    # cdk deploy returns once the patch is applied; the canary's precompile only starts then.
    cdk.CfnOutput(
        cdk.Stack.of(cluster),
        "SpeculativeRevisionStarting",
        value=canary_start_message(config),
        description="What is still starting after cdk deploy returns",
    )
    return patch
