"""Every bad configuration is rejected when the config is built (no synth needed, so these
run in `make test-fast`), with a message naming the config path to change. The app-level
proof that synth stops before any construct lives in tests/stacks."""

from __future__ import annotations

import pytest

from experiment import ConfigError, build_config
from experiment.config import FORK_IMAGE, PLUGIN_IMAGE, PROFILES, ServingProfile
from experiment.loading import cdk_json_context, context_from_pairs

NEW = "serving.profile=new-deployment"
# A DFlash pair the plugin accepts: TP 4 (one device at LNC 2), k = block_size - 1.
DFLASH = [
    NEW,
    "serving.speculative_method=dflash",
    "serving.draft_model=z-lab/Qwen3-32B-DFlash-b16",
    "serving.dflash_block_size=16",
    "serving.num_speculative_tokens=15",
    "serving.neuron_devices=1",
    "serving.tensor_parallel_size=4",
]

BAD_CONFIGS: dict[str, tuple[list[str], str]] = {
    # Live-guardrail and probe settings act only through the live rules.
    "live-setting-with-live-guardrails-off": (
        ["guardrails.live.enabled=false", "guardrails.live.failure_limit=3"],
        r"guardrails\.live\.failure_limit can never take effect: guardrails\.live\.enabled is "
        r"false.*set guardrails\.live\.enabled=true",
    ),
    "probe-with-live-guardrails-off": (
        [
            "guardrails.live.enabled=false",
            "guardrails.probe.enabled=true",
            "guardrails.probe.schedule=*/5 * * * *",
        ],
        r"guardrails\.probe\.enabled, guardrails\.probe\.schedule can never take effect",
    ),
    # Alternating blocks smaller than the users would leave some of them idle.
    "alternating-block-below-concurrency": (
        [
            "loadtest.arms_mode=alternating",
            "loadtest.concurrency=8",
            "loadtest.alternating_block_requests=4",
        ],
        r"loadtest\.alternating_block_requests \(4\) is below loadtest\.concurrency \(8\)"
        r".*raise alternating_block_requests",
    ),
    # A worker pod serves one master per arm for the whole run, not one per block.
    "alternating-with-worker-pods": (
        [
            "loadtest.arms_mode=alternating",
            "loadtest.concurrency=8",
            "loadtest.workers=2",
        ],
        r"loadtest\.arms_mode alternating .* loadtest\.workers is 2: set loadtest\.workers=1",
    ),
    "alternating-block-zero": (
        ["loadtest.alternating_block_requests=0"],
        r"loadtest\.alternating_block_requests: Input should be greater than or equal to 1",
    ),
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
    # Only vLLM's own binding or one share of the cores per server; a typo names the key.
    "local-cpu-binding-unknown": (
        ["local.cpu_binding=split"],
        r"local\.cpu_binding: Input should be 'apart', 'isolated' or 'shared'",
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
        [NEW, "serving.draft_model=Qwen/Qwen3-1.7B"],
        r"serving\.draft_model Qwen/Qwen3-1\.7B is a plain model .*serving\.speculative_method "
        r"is 'eagle3': vllm-neuron 1\.x has no plain draft-model speculation",
    ),
    "plugin-with-the-fork-method": (
        [NEW, "serving.speculative_method=draft_model"],
        r"serving\.speculative_method is 'draft_model'.*only with \['eagle3', 'dflash'\]",
    ),
    "plugin-with-the-0.2.x-method": (
        [NEW, "serving.speculative_method=eagle"],
        r"serving\.speculative_method is 'eagle'.*only with \['eagle3', 'dflash'\]",
    ),
    "plugin-with-the-fork-image": (
        [NEW, f"serving.image={FORK_IMAGE}"],
        r"serving\.image is the vLLM 0\.9 fork's DLC, which has no vllm-neuron 1\.x",
    ),
    "reproduce-with-the-plugin-image": (
        [f"serving.image={PLUGIN_IMAGE}"],
        r"serving\.image is the vllm-neuron 1\.x DLC.*serving\.profile",
    ),
    "unknown-profile": (
        ["serving.profile=plugin"],
        r"serving\.profile: Input should be 'reproduce' or 'new-deployment'",
    ),
    "dflash-k-not-block-size-minus-one": (
        [*DFLASH, "serving.num_speculative_tokens=7"],
        r"serving\.num_speculative_tokens is 7, but a DFlash drafter with block_size 16 needs "
        r"exactly 15",
    ),
    "dflash-without-its-block-size": (
        [part for part in DFLASH if "dflash_block_size" not in part],
        r"serving\.dflash_block_size is not set",
    ),
    "dflash-at-tp-32": (
        [*DFLASH[:5]],
        r"serving\.tensor_parallel_size is 32, but DFlash on Neuron is validated for \[4, 8\]",
    ),
    # DFlash turns prefix caching off; on for the baseline only would make the arms differ.
    "prefix-caching-differing-between-arms": (
        [*DFLASH, "serving.prefix_caching=true"],
        r"serving\.prefix_caching is on, but DFlash on Neuron refuses prefix caching .*arms "
        r"must run it alike",
    ),
    "prefix-caching-on-the-frozen-fork": (
        ["serving.prefix_caching=true"],
        r"serving\.prefix_caching is on, but only the plugin generation renders it",
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
    # The report tells the arms apart by label: the tiered arm cannot borrow a serving one's.
    "tiered-label-of-a-serving-arm": (
        ["loadtest.tiered_label=SD"],
        r"loadtest\.tiered_label 'SD' is also a serving arm's label",
    ),
    "temperature-not-finite": (["loadtest.temperature=.nan"], r"loadtest\.temperature: "),
    # Masters that run at once take one port per arm upwards from master_port.
    "master-ports-beyond-65535": (
        ["loadtest.master_port=65535"],
        r"loadtest\.master_port \(65535\) leaves no room .* set loadtest\.master_port to at most",
    ),
    "metric-namespace-of-aws": (
        ["loadtest.metric_namespace=AWS/SpecDecode"],
        r"loadtest\.metric_namespace: 'AWS/SpecDecode' is not a CloudWatch namespace",
    ),
    "relative-mount-path": (
        ["model_store.mount_path=models"],
        r"model_store\.mount_path: String should match pattern",
    ),
    "tuning-drafters-repeated": (
        ["tuning.drafters=[eagle3, eagle3]"],
        r"tuning\.drafters \['eagle3', 'eagle3'\]: name one or more distinct drafters",
    ),
    "tuning-local-draft-unknown": (
        ["tuning.local_drafts=[huge]"],
        r"tuning\.local_drafts \['huge'\]: name one or more distinct entries of "
        r"local\.generator\.drafts \['large', 'small'\]",
    ),
    "tuning-local-draft-repeated": (
        ["tuning.local_drafts=[small, small]"],
        r"tuning\.local_drafts \['small', 'small'\]: name one or more distinct entries",
    ),
    "tuning-local-drafts-empty": (
        ["tuning.local_drafts=[]"],
        r"tuning\.local_drafts \[\]: name one or more distinct entries",
    ),
    "tuning-drafter-unknown": (
        ["tuning.drafters=[medusa]"],
        r"tuning\.drafters\.0: Input should be 'draft-model' or 'eagle3'",
    ),
    "local-draft-named-eagle3": (
        ["local.generator.drafts.eagle3.weight_share=0.01"],
        r"local\.generator\.drafts has an entry named 'eagle3'.*rename that draft",
    ),
    # Input-length bucket edges: one check for both fields that hold them.
    "traffic-buckets-decreasing": (
        ["loadtest.traffic.length_buckets=[2048, 512]"],
        r"loadtest\.traffic\.length_buckets: \[2048, 512\] must be strictly increasing, such "
        r"as \[512, 2048\]",
    ),
    "local-traffic-buckets-repeated": (
        ["local.traffic_length_buckets=[128, 128]"],
        r"local\.traffic_length_buckets: \[128, 128\] must be strictly increasing, such as "
        r"\[128\]",
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


def test_the_profile_alone_sets_image_drafter_method_k_and_tuning() -> None:
    config = build_config(context_from_pairs([NEW]))
    serving, tuning = config.serving, config.tuning
    assert serving.generation == "neuron-plugin"
    assert serving.image == PLUGIN_IMAGE
    assert (serving.draft_model, serving.speculative_method) == (
        "RedHatAI/Qwen3-32B-speculator.eagle3",
        "eagle3",
    )
    assert 3 <= serving.num_speculative_tokens <= 7
    assert tuning.drafts == ["RedHatAI/Qwen3-32B-speculator.eagle3"]
    assert tuning.measured_k == [3, 4, 5, 6, 7]
    assert tuning.predict_k_max == 7
    # The default profile keeps the published experiment.
    default = build_config({})
    assert default.serving.profile == ServingProfile.REPRODUCE
    assert default.serving.generation == "neuron-fork"
    assert (default.serving.image, default.serving.draft_model) == (FORK_IMAGE, "Qwen/Qwen3-1.7B")
    assert default.tuning.drafts == list(PROFILES[ServingProfile.REPRODUCE].tuning_drafts)


def test_a_value_set_explicitly_wins_over_the_profile() -> None:
    config = build_config(
        context_from_pairs(
            [NEW, "serving.num_speculative_tokens=3", "serving.image=example.com/vllm-neuron:1.2",
             "tuning.fit_k=[3, 5]", "tuning.holdout_k=[4]"]
        )
    )  # fmt: skip
    assert config.serving.num_speculative_tokens == 3
    assert config.serving.image == "example.com/vllm-neuron:1.2"
    assert config.tuning.measured_k == [3, 4, 5]


def test_profiles_say_how_acceptance_is_known_and_how_far_the_drafter_is_validated() -> None:
    new = PROFILES[ServingProfile.NEW_DEPLOYMENT]
    # What is open is said exactly: EAGLE3 is supported for Qwen3 on vllm-neuron, whether
    # this speculators-format drafter loads there is not yet run.
    assert "supported for Qwen3" in new.drafter and "not yet run" in new.drafter
    assert "counters" in new.acceptance
    assert "client-side" in PROFILES[ServingProfile.REPRODUCE].acceptance
    assert new.k_range == (3, 7)


def test_a_valid_dflash_pair_runs_chunked_prefill_off_on_both_arms() -> None:
    from experiment import Arm
    from runtime.render import render

    config = build_config(context_from_pairs(DFLASH))
    base, spec = (render(config.serving_spec(arm)).flags() for arm in Arm)
    for flags in (base, spec):
        assert "--no-enable-chunked-prefill" in flags
        assert "--no-enable-prefix-caching" in flags
    assert "--no-async-scheduling" in spec


def test_eagle3_with_prefix_caching_on_runs_it_on_both_arms() -> None:
    from experiment import Arm
    from runtime.render import render

    config = build_config(context_from_pairs([NEW, "serving.prefix_caching=true"]))
    for arm in Arm:
        assert "--enable-prefix-caching" in render(config.serving_spec(arm)).flags()


@pytest.mark.parametrize(("temperature", "greedy"), [("0", True), ("0.7", False)])
def test_on_device_sampling_is_greedy_only_for_a_greedy_load(temperature, greedy) -> None:
    import json

    from experiment import Arm
    from runtime.render import render

    config = build_config(context_from_pairs([NEW, f"loadtest.temperature={temperature}"]))
    for arm in Arm:
        extra = json.loads(render(config.serving_spec(arm)).flags()["--additional-config"] or "")
        assert extra["neuron_config"]["on_device_sampling_config"]["all_greedy"] is greedy


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


def test_live_guardrails_off_alone_or_with_the_probe_off_or_a_report_factor_is_valid() -> None:
    """Only settings that could never act are refused: turning the live guardrails off, the
    probe off with them, and the report's pilot_floor_factor stay valid."""
    off = {"experiment.guardrails.live.enabled": "false"}
    assert not build_config(off).guardrails.live.enabled
    build_config({**off, "experiment.guardrails.probe.enabled": "false"})
    build_config({**off, "experiment.guardrails.live.pilot_floor_factor": "0.8"})
    build_config({"experiment.guardrails.live.failure_limit": "3"})  # live on: it acts


def test_a_cloudwatch_analysis_window_shorter_than_the_alarm_periods_is_refused() -> None:
    off = {"experiment.guardrails.live.enabled": "false"}
    with pytest.raises(ConfigError, match=r"routing\.eks\.analysis_window_periods 2 is shorter"):
        build_config(
            {**off, "experiment.guardrails.evaluation_periods": "3",
             "experiment.routing.eks.analysis_window_periods": "2"}
        )  # fmt: skip
    build_config({**off, "experiment.guardrails.evaluation_periods": "3"})  # window 3: fits


def test_a_pending_time_longer_than_its_window_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"guardrails\.live\.pending_s 400 is longer"):
        build_config({"experiment.guardrails.live.pending_s": "400"})


@pytest.mark.parametrize(
    ("schedule", "stale", "ok"),
    [("*/15 * * * *", "1201", True), ("*/15 * * * *", "1200", False),
     ("0 * * * *", "2400", False), ("0 * * * *", "3901", True)],
)  # fmt: skip
def test_the_probe_results_must_outlast_the_schedule_and_a_run(
    schedule: str, stale: str, ok: bool
) -> None:
    """Longest gap plus deadline_s (300 s by default) must be shorter than stale_after_s."""
    overrides = {"experiment.guardrails.probe.schedule": schedule,
                 "experiment.guardrails.probe.stale_after_s": stale}  # fmt: skip
    if ok:
        build_config(overrides)
    else:
        with pytest.raises(ConfigError, match=r"guardrails\.probe\.stale_after_s"):
            build_config(overrides)


def test_a_malformed_probe_schedule_is_refused_naming_the_setting() -> None:
    with pytest.raises(ConfigError, match=r"guardrails\.probe\.schedule: cron minute"):
        build_config({"experiment.guardrails.probe.schedule": "61 * * * *"})
