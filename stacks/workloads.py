"""The Kubernetes side of the experiment: the load-test image and the cdk8s charts.

``charts.build_charts`` (owned by charts/) turns the same config into the DRA claim, the S3
PV/PVC, the two vLLM services, the precompile Jobs and the load-test Job; each chart is
applied through the cluster's kubectl provider after the add-ons and the DRA driver.
"""

from __future__ import annotations

import aws_cdk as cdk
import cdk8s
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from experiment import ExperimentConfig
from experiment.loading import PROJECT_ROOT

# The image context is the repository root, but only what the load test imports enters it
# (never .venv, .cache, cdk.out, runs/...); README.md because pyproject.toml names it.
LOADTEST_CONTEXT_INCLUDES = ("pyproject.toml", "README.md", "experiment", "runtime", "loadtest")
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
) -> list[eks.KubernetesManifest]:
    import charts  # imported here: charts/ is written separately and pulls in cdk8s imports

    chart_app = cdk8s.App()
    inputs = charts.ClusterInputs(bucket_name=bucket_name, loadtest_image=loadtest_image_uri)
    manifests = []
    for chart in charts.build_charts(chart_app, config, inputs):
        manifest = cluster.add_cdk8s_chart(f"Chart-{chart.node.id}", chart)
        for prerequisite in prerequisites:
            manifest.node.add_dependency(prerequisite)
        manifests.append(manifest)
    return manifests
