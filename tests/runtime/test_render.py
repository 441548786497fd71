"""The vLLM command lines of both arms, per generation."""

from __future__ import annotations

import dataclasses
import json

import pytest

from experiment import build_config
from experiment.config import Arm
from runtime.render import (
    API_SERVER_MODULE,
    PER_REQUEST_SPEC_METRICS_ARGS,
    PER_REQUEST_SPEC_METRICS_REFUSED,
    VllmCommand,
    num_gpu_blocks_override,
    render,
)
from runtime.spec import Generation, ServingSpec

SPECULATIVE_FLAGS = {"--speculative-config"}
PER_REQUEST = "--per-request-spec-decode-metrics"


def _pair(config=None) -> tuple[VllmCommand, VllmCommand]:
    config = config or build_config({})
    return render(config.serving_spec(Arm.BASELINE)), render(config.serving_spec(Arm.SPECULATIVE))


def _plugin_config():
    return build_config({"experiment.serving.profile": "new-deployment"})


def test_argv_is_python_module_then_args() -> None:
    command = VllmCommand("m", ("--a", "1"), {})
    assert command.argv() == ["python3", "-m", "m", "--a", "1"]
    assert command.argv("/venv/bin/python")[0] == "/venv/bin/python"


def test_fork_speculative_has_draft_k7_and_fused_speculation_baseline_not() -> None:
    config = build_config({})
    base, spec = _pair(config)
    assert base.module == spec.module == API_SERVER_MODULE
    speculative = json.loads(spec.flags()["--speculative-config"])
    assert speculative["model"] == config.model_path("Qwen/Qwen3-1.7B")
    assert speculative["num_speculative_tokens"] == 7
    assert json.loads(spec.flags()["--override-neuron-config"])["enable_fused_speculation"]
    assert "--speculative-config" not in base.flags()
    assert "enable_fused_speculation" not in json.loads(base.flags()["--override-neuron-config"])
    assert not any("1.7B" in arg for arg in base.args)


def test_fork_method_defaults_to_the_published_experiments_and_config_overrides_it() -> None:
    _, spec = _pair(build_config({}))
    assert json.loads(spec.flags()["--speculative-config"])["method"] == "eagle"
    _, custom = _pair(build_config({"experiment.serving.speculative_method": "draft_model"}))
    assert json.loads(custom.flags()["--speculative-config"])["method"] == "draft_model"


@pytest.mark.parametrize(
    ("make_config", "speculative_only"),
    [
        (lambda: build_config({}), SPECULATIVE_FLAGS),
        # The plugin turns async scheduling off on a speculating server (charts/symmetry.py)
        # and, on vLLM 0.29, reports each request's acceptance (the fork's engine cannot).
        (_plugin_config, SPECULATIVE_FLAGS | {"--no-async-scheduling", PER_REQUEST}),
    ],
)
def test_arms_share_every_other_flag(make_config, speculative_only) -> None:
    base, spec = _pair(make_config())
    base_flags, spec_flags = base.flags(), spec.flags()
    assert set(spec_flags) - set(base_flags) == speculative_only
    assert set(base_flags) <= set(spec_flags)
    for flag, value in base_flags.items():
        if flag == "--override-neuron-config":
            continue  # compared below: only the fork's fused-speculation key may differ
        assert spec_flags[flag] == value, flag
    # Environment: only where the compiled artifacts live differs (one set per arm).
    differing = {key for key in base.env if base.env[key] != spec.env.get(key)}
    assert set(base.env) == set(spec.env)
    assert differing == {"NEURON_COMPILED_ARTIFACTS"}


def test_fork_env_selects_nxdi_and_lnc() -> None:
    base, _ = _pair()
    assert base.env["VLLM_NEURON_FRAMEWORK"] == "neuronx-distributed-inference"
    assert base.env["NEURON_LOGICAL_NC_CONFIG"] == "2"
    assert base.env["NEURON_COMPILED_ARTIFACTS"].endswith("/qwen-vllm")
    assert base.flags()["--host"] == "0.0.0.0"


def test_plugin_uses_additional_config_and_block_override() -> None:
    base, spec = _pair(_plugin_config())
    assert "--override-neuron-config" not in spec.flags()
    extra = json.loads(spec.flags()["--additional-config"])
    assert extra == {"neuron_config": {"on_device_sampling_config": {"all_greedy": True}}}
    assert json.loads(spec.flags()["--speculative-config"])["method"] == "eagle3"
    # Prefix caching off on both arms, as on the fork (vllm-neuron 1.x defaults it on).
    assert "--no-enable-prefix-caching" in base.flags()
    assert "--no-enable-prefix-caching" in spec.flags()
    # ceil(1024 / 32) * 4 sequences
    assert base.flags()["--num-gpu-blocks-override"] == "128"
    assert spec.flags()["--num-gpu-blocks-override"] == "128"


def test_num_gpu_blocks_override_rounds_up() -> None:
    spec = build_config({}).serving_spec(Arm.BASELINE)
    assert num_gpu_blocks_override(dataclasses.replace(spec, max_model_len=1000)) == 32 * 4
    assert num_gpu_blocks_override(dataclasses.replace(spec, max_model_len=1025)) == 33 * 4


def test_local_cpu_profile_uses_draft_model_method_on_loopback() -> None:
    config = build_config({})
    base = render(config.local_serving_spec(Arm.BASELINE, "/m/target", "/m/draft"))
    spec = render(config.local_serving_spec(Arm.SPECULATIVE, "/m/target", "/m/draft"))
    assert json.loads(spec.flags()["--speculative-config"]) == {
        "method": "draft_model",
        "model": "/m/draft",
        "num_speculative_tokens": 7,
    }
    assert "--speculative-config" not in base.flags()
    assert base.flags()["--host"] == spec.flags()["--host"] == config.local.host
    assert base.flags()["--port"] == str(config.local.baseline_port)
    assert spec.flags()["--port"] == str(config.local.speculative_port)
    assert base.env == spec.env == {"VLLM_CPU_KVCACHE_SPACE": str(config.local.cpu_kvcache_gib)}
    assert not any(arg.startswith("--override-neuron") for arg in spec.args)
    assert spec.flags()[PER_REQUEST] == "summary"  # each request's acceptance, SD arm only
    only_sd = SPECULATIVE_FLAGS | {PER_REQUEST, "--port"}
    shared = {k: v for k, v in spec.flags().items() if k not in only_sd}
    assert shared == {k: v for k, v in base.flags().items() if k != "--port"}


@pytest.mark.parametrize("generation", list(Generation))
def test_per_request_metrics_only_on_a_speculating_server_whose_engine_takes_it(
    generation: Generation,
) -> None:
    config = _plugin_config() if generation is Generation.NEURON_PLUGIN else build_config({})
    if generation is Generation.LOCAL_CPU:
        base, spec = (config.local_serving_spec(arm, "/m/t", "/m/d") for arm in Arm)
    else:
        base, spec = (config.serving_spec(arm) for arm in Arm)
    assert base.generation == spec.generation == generation
    # vLLM refuses the flag without a speculative config (vllm/config/vllm.py).
    assert PER_REQUEST not in render(base).flags()
    args = render(spec).args
    if generation in PER_REQUEST_SPEC_METRICS_REFUSED:
        assert PER_REQUEST not in args
    else:
        at = args.index(PER_REQUEST)
        assert tuple(args[at : at + 2]) == PER_REQUEST_SPEC_METRICS_ARGS == (PER_REQUEST, "summary")


def test_extra_args_are_appended_to_both_arms() -> None:
    config = build_config({})
    for arm in Arm:
        spec = dataclasses.replace(config.serving_spec(arm), extra_args=("--enforce-eager",))
        assert render(spec).args[-1] == "--enforce-eager"


def test_spec_from_json_renders_identically() -> None:
    spec = build_config({}).serving_spec(Arm.SPECULATIVE)
    assert render(ServingSpec.from_json(spec.to_json())) == render(spec)
    assert spec.generation == Generation.NEURON_FORK
