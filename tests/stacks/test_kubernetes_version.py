"""The default Kubernetes version, its kubectl layer, and the minimum (no CDK synth)."""

from __future__ import annotations

import importlib.util

import aws_cdk as cdk
import pytest

from experiment import ConfigError, build_config
from experiment.config import MIN_KUBERNETES_VERSION
from stacks.cluster import kubectl_layer

pytestmark = pytest.mark.infra  # the CDK kubectl layers

DEFAULT = build_config({}).cluster


def test_the_default_is_at_least_1_35_and_its_kubectl_layer_is_installed() -> None:
    assert (1, DEFAULT.kubernetes_minor) >= (1, 35)
    # A default bumped without its layer package would fail every synth.
    module = f"aws_cdk.lambda_layer_kubectl_v{DEFAULT.kubernetes_minor}"
    assert importlib.util.find_spec(module) is not None, module


def test_the_minimum_stays_1_34() -> None:
    assert MIN_KUBERNETES_VERSION == (1, 34)
    assert (
        build_config({"experiment.cluster.kubernetes_version": "1.34"}).cluster.kubernetes_minor
        == 34
    )
    with pytest.raises(ConfigError, match=r"cluster\.kubernetes_version '1\.33'"):
        build_config({"experiment.cluster.kubernetes_version": "1.33"})


def test_a_version_without_its_layer_names_the_package_to_add() -> None:
    stack = cdk.Stack(cdk.App(), "Probe")
    with pytest.raises(ValueError, match=r"aws-cdk\.lambda-layer-kubectl-v99"):
        kubectl_layer(stack, 99)


def test_1_36_is_a_choice_with_its_kubectl_layer_installed() -> None:
    assert build_config({"experiment.cluster.kubernetes_version": "1.36"}).cluster
    stack = cdk.Stack(cdk.App(), "Probe36")
    assert kubectl_layer(stack, 36) is not None  # aws-cdk.lambda-layer-kubectl-v36 (infra)
