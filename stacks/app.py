"""Build the whole CDK app from one validated configuration."""

from __future__ import annotations

import aws_cdk as cdk

from experiment import ExperimentConfig
from experiment.loading import deploy_config
from stacks.checkov import AcknowledgeCdkHandlers
from stacks.cluster import ClusterStack
from stacks.dashboard import ObservabilityStack
from stacks.model_store import ModelStoreStack
from stacks.nag import add_checks
from stacks.network import NetworkStack


def build_app(app: cdk.App) -> tuple[ExperimentConfig, list[cdk.Stack]]:
    """Validate the config from the app's context, then create every stack.

    A bad configuration raises ``experiment.ConfigError`` before any construct exists, and so
    does one without what only these stacks need (``build_config``'s ``for_eks``).
    """
    # The one validation of a deploy, shared with the kubectl path (python -m charts): the
    # configuration, every deploy pin, the support calendar (its warnings printed there).
    config = deploy_config(app.node.get_all_context())
    return config, create_stacks(app, config)


def create_stacks(app: cdk.App, config: ExperimentConfig) -> list[cdk.Stack]:
    env = cdk.Environment(account=config.account, region=config.region)
    if config.account:
        # With a concrete account CDK would look the AZs up; the config already names them.
        app.node.set_context(
            f"availability-zones:account={config.account}:region={config.region}",
            config.network.availability_zones,
        )
    add_checks(app)
    cdk.Aspects.of(app).add(AcknowledgeCdkHandlers())
    prefix = config.project
    tags = {"project": config.project}
    network = NetworkStack(
        app, "Network", config=config, env=env, stack_name=f"{prefix}-network", tags=tags
    )
    store = ModelStoreStack(
        app, "ModelStore", config=config, env=env, stack_name=f"{prefix}-model-store", tags=tags
    )
    observability = ObservabilityStack(
        app,
        "Observability",
        config=config,
        logs_key=network.logs_key,
        env=env,
        stack_name=f"{prefix}-observability",
        tags=tags,
    )
    cluster = ClusterStack(
        app,
        "Cluster",
        config=config,
        vpc=network.vpc,
        logs_key=network.logs_key,
        bucket_name=store.bucket.bucket_name,
        mountpoint_role=store.mountpoint_role,
        bucket_key_arn=store.key.key_arn,
        model_import_role=store.model_import_role,
        guardrail_workspace=observability.workspace,
        env=env,
        stack_name=f"{prefix}-cluster",
        tags=tags,
    )
    return [network, store, cluster, observability]
