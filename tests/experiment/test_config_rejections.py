"""Every bad configuration is rejected when the config is built (no synth needed, so these
run in `make test-fast`), with a message naming the config path to change. The app-level
proof that synth stops before any construct lives in tests/stacks."""

from __future__ import annotations

import pytest

from experiment import ConfigError, build_config
from experiment.loading import cdk_json_context, context_from_pairs

# Any image with vllm-neuron: the plugin generation refuses the fork's DLC.
PLUGIN_IMAGE = "serving.image=registry.example.com/vllm-neuron:0.3"

BAD_CONFIGS: dict[str, tuple[list[str], str]] = {
    # The lossless alarm's tolerance is a share of the output: (0, 1].
    "lossless-tolerance-above-1": (
        ["guardrails.lossless_min_prefix_agreement=1.5"],
        r"guardrails\.lossless_min_prefix_agreement: Input should be less than or equal to 1",
    ),
    "lossless-tolerance-zero": (
        ["guardrails.lossless_min_prefix_agreement=0"],
        r"guardrails\.lossless_min_prefix_agreement: Input should be greater than 0",
    ),
    # The first-mismatch count it replaced is gone: a stale config says so, naming the key.
    "lossless-mismatch-count-removed": (
        ["guardrails.max_lossless_mismatches=0"],
        r"guardrails\.max_lossless_mismatches: unknown key",
    ),
    "unknown-key": (
        ["serving.num_speculative_token=7"],
        r"serving\.num_speculative_token: unknown key",
    ),
    "misspelt-section": (["servng.num_speculative_tokens=7"], r"servng: unknown key"),
    "k-below-range": (
        ["serving.num_speculative_tokens=0"],
        r"serving\.num_speculative_tokens is 0; choose k between 1 and 15",
    ),
    "k-above-range": (
        ["serving.num_speculative_tokens=16"],
        r"serving\.num_speculative_tokens is 16; choose k between 1 and 15",
    ),
    # Was silently replaced by serving's k (0) or accepted until the command was rendered (99).
    "local-k-zero": (
        ["experiment.local.num_speculative_tokens=0"],
        r"local\.num_speculative_tokens is 0; choose k between 1 and 15",
    ),
    "local-k-16": (
        ["local.num_speculative_tokens=16"],
        r"local\.num_speculative_tokens is 16; choose k",
    ),
    "local-k-99": (
        ["local.num_speculative_tokens=99"],
        r"local\.num_speculative_tokens is 99; choose k",
    ),
    "tp-times-lnc-mismatch": (
        ["serving.tensor_parallel_size=64"],
        r"serving\.tensor_parallel_size 64 with LNC 2 does not use the 32 logical NeuronCores",
    ),
    "compiled-length-too-short": (
        ["serving.compiled_max_model_len=512"],
        r"serving\.max_model_len 1024 exceeds the compiled length 512",
    ),
    "capacity-block-without-reservation": (
        ["cluster.neuron_nodes.capacity_type=capacity-block"],
        r"needs capacity_reservation_id",
    ),
    "capacity-block-without-az": (
        [
            "cluster.neuron_nodes.capacity_type=capacity-block",
            "cluster.neuron_nodes.capacity_reservation_id=cr-0123456789abcdef0",
        ],
        r"'capacity-block' needs availability_zone",
    ),
    "reservation-without-az": (
        [
            "cluster.neuron_nodes.capacity_type=reservation",
            "cluster.neuron_nodes.capacity_reservation_id=cr-0123456789abcdef0",
        ],
        r"'reservation' needs availability_zone",
    ),
    "capacity-az-outside-the-network": (
        [
            "cluster.neuron_nodes.capacity_type=capacity-block",
            "cluster.neuron_nodes.capacity_reservation_id=cr-0123456789abcdef0",
            "cluster.neuron_nodes.availability_zone=us-east-2d",
        ],
        r"availability_zone 'us-east-2d' is not one of network\.availability_zones",
    ),
    "empty-az-list": (
        ["network.availability_zones=[]"],
        r"availability_zones must list at least 2 AZs",
    ),
    "bad-cidr": (
        ["network.vpc_cidr=10.42.0.0/33"],
        r"vpc_cidr '10\.42\.0\.0/33' is not an IPv4 network",
    ),
    "node-group-min-above-max": (
        ["cluster.system_nodes.min_size=4", "cluster.system_nodes.max_size=3"],
        r"min_size 4 is greater than max_size 3",
    ),
    "draft-equal-to-target": (
        ["serving.draft_model=Qwen/Qwen3-32B"],
        r"serving\.draft_model is the target itself",
    ),
    "plugin-with-a-plain-draft": (
        ["serving.generation=neuron-plugin", "serving.draft_model=Qwen/Qwen3-1.7B"],
        r"serving\.draft_model Qwen/Qwen3-1\.7B is a plain model, but generation "
        r"'neuron-plugin'.*use generation 'neuron-fork'",
    ),
    "plugin-with-the-fork-method": (
        ["serving.generation=neuron-plugin", "serving.speculative_method=draft_model"],
        r"serving\.speculative_method is 'draft_model'.*one of \['eagle', 'eagle3'\]",
    ),
    "plugin-with-the-fork-image": (
        ["serving.generation=neuron-plugin"],
        r"serving\.image is the vLLM 0\.9 fork's DLC, which has no vllm-neuron plugin",
    ),
    "plugin-eagle3-draft-with-eagle-method": (
        ["serving.generation=neuron-plugin", "serving.speculative_method=eagle"],
        r"is an EAGLE3 draft but serving\.speculative_method is 'eagle'; set it to 'eagle3'",
    ),
    "namespace-not-a-dns-label": (
        ["serving.namespace=Qwen_Serving"],
        r"serving\.namespace: 'Qwen_Serving' is not a valid Kubernetes namespace",
    ),
    "namespace-too-long": (
        [f"serving.namespace={'q' * 64}"],
        r"serving\.namespace: .* at most 63",
    ),
    "service-starting-with-a-digit": (
        ["serving.speculative_service=7-sd"],
        r"serving\.speculative_service: '7-sd' is not a valid Kubernetes Service name",
    ),
    "neuron-namespace-uppercase": (
        ["cluster.neuron_namespace=Neuron"],
        r"cluster\.neuron_namespace: 'Neuron' is not a valid Kubernetes namespace",
    ),
    "service-account-with-underscore": (
        ["loadtest.service_account=load_test"],
        r"loadtest\.service_account: 'load_test' is not a valid Kubernetes service account",
    ),
    "negative-temperature": (
        ["loadtest.temperature=-0.5"],
        r"loadtest\.temperature: Input should be greater than or equal to 0",
    ),
    "temperature-above-2": (
        ["loadtest.temperature=2.5"],
        r"loadtest\.temperature: Input should be less than or equal to 2",
    ),
    "temperature-not-finite": (["loadtest.temperature=.nan"], r"loadtest\.temperature: "),
    "metric-namespace-of-aws": (
        ["loadtest.metric_namespace=AWS/SpecDecode"],
        r"loadtest\.metric_namespace: 'AWS/SpecDecode' is not a CloudWatch namespace",
    ),
    "relative-mount-path": (
        ["model_store.mount_path=models"],
        r"model_store\.mount_path: String should match pattern",
    ),
    "region-without-the-neuron-type": (
        ["region=eu-west-1", 'network.availability_zones=["eu-west-1a", "eu-west-1b"]'],
        r"region 'eu-west-1' does not offer trn2\.48xlarge",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_CONFIGS))
def test_config_rejects(name: str) -> None:
    pairs, message = BAD_CONFIGS[name]
    with pytest.raises(ConfigError, match=message):
        build_config({**cdk_json_context(), **context_from_pairs(pairs)})


def test_plugin_generation_alone_brings_its_eagle3_draft_and_method() -> None:
    serving = build_config(
        context_from_pairs(["serving.generation=neuron-plugin", PLUGIN_IMAGE])
    ).serving
    assert serving.draft_model == "RedHatAI/Qwen3-32B-speculator.eagle3"
    assert serving.speculative_method == "eagle3"
    # The fork keeps the published experiment's plain draft.
    assert build_config({}).serving.draft_model == "Qwen/Qwen3-1.7B"


def test_plugin_with_an_eagle1_draft_and_method_is_accepted() -> None:
    serving = build_config(
        context_from_pairs(
            [
                "serving.generation=neuron-plugin",
                PLUGIN_IMAGE,
                "serving.draft_model=my-org/Qwen3-32B-EAGLE",
                "serving.speculative_method=eagle",
            ]
        )
    ).serving
    assert (serving.draft_model, serving.speculative_method) == ("my-org/Qwen3-32B-EAGLE", "eagle")


def test_local_k_is_used_as_given_and_defaults_to_the_deployment_k() -> None:
    from experiment import Arm

    config = build_config(context_from_pairs(["local.num_speculative_tokens=3"]))
    assert config.local_serving_spec(Arm.SPECULATIVE, "t", "d").num_speculative_tokens == 3
    default = build_config({})
    spec = default.local_serving_spec(Arm.SPECULATIVE, "t", "d")
    assert spec.num_speculative_tokens == default.serving.num_speculative_tokens


def test_valid_kubernetes_names_are_accepted() -> None:
    config = build_config(
        context_from_pairs(
            [
                "serving.namespace=0-team",
                "serving.baseline_service=a",
                "loadtest.service_account=load.test-1",
            ]
        )
    )
    assert config.serving.namespace == "0-team"


def test_one_node_group_field_can_be_overridden_alone() -> None:
    # `-c cluster.system_nodes.max_size=5` must keep the other defaults.
    nodes = build_config({"experiment.cluster.system_nodes.max_size": "5"}).cluster.system_nodes
    assert nodes.max_size == 5 and nodes.instance_type and nodes.desired_size >= nodes.min_size
