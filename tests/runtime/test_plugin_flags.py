"""The plugin generation's command line, flag by flag, against the source that documents it.

vllm-neuron 1.x (Neuron SDK 2.33: vLLM 0.29 + vllm-neuron 1.2). Each row of FLAG_SOURCES is
one flag the renderer may emit and where it was checked; a flag the renderer emits that has
no row fails the test, so a new flag cannot ship unchecked. Paths are repo:path.
"""

from __future__ import annotations

import dataclasses
import json
import shlex

import pytest

from runtime.render import num_gpu_blocks_override, render
from runtime.spec import Generation, ServingSpec

PLUGIN_DOCS = "vllm-project/vllm-neuron:docs/guides/features-guide.md"
DESIGN = "vllm-project/vllm-neuron:docs/design/speculation/speculative_decoding_design.md"
DFLASH = "vllm-project/vllm-neuron:vllm_neuron/vllm/spec_decode/dflash.py"
VLLM_ARGS = "vllm-project/vllm:vllm/engine/arg_utils.py"
# Read in the vllm 0.29.0 sdist (PyPI), the DLC's vLLM: ObservabilityConfig.
VLLM_OBSERVABILITY = "vllm-project/vllm@v0.29.0:vllm/config/observability.py"
# FrontendArgs (host, port); vllm/entrypoints/launchers/cli_args.py in the local 0.32.
FRONTEND_ARGS = "vllm-project/vllm:vllm/entrypoints/openai/cli_args.py"

# flag -> (source, what the source shows)
FLAG_SOURCES: dict[str, tuple[str, str]] = {
    "--model": (PLUGIN_DOCS, "speculative decoding CLI example"),
    "--served-model-name": (VLLM_ARGS, "ModelConfig.served_model_name"),
    "--host": (FRONTEND_ARGS, "FrontendArgs.host"),
    "--port": (FRONTEND_ARGS, "FrontendArgs.port"),
    "--seed": (VLLM_ARGS, "model_group --seed"),
    "--max-model-len": (PLUGIN_DOCS, "speculative decoding CLI example"),
    "--max-num-seqs": (PLUGIN_DOCS, "speculative decoding CLI example"),
    "--block-size": (PLUGIN_DOCS, "Prefix caching, sizing the KV cache: block_size must be set"),
    "--tensor-parallel-size": (PLUGIN_DOCS, "speculative decoding CLI example"),
    "--num-gpu-blocks-override": (PLUGIN_DOCS, "sizing the KV cache; DFlash formula"),
    "--no-enable-prefix-caching": (PLUGIN_DOCS, "Prefix caching: on by default, this disables"),
    "--enable-prefix-caching": (VLLM_ARGS, "cache_kwargs enable_prefix_caching (BooleanOptional)"),
    "--no-enable-chunked-prefill": (DFLASH, "DFlashProposer refuses chunked prefill"),
    "--speculative-config": (PLUGIN_DOCS, "method, model, num_speculative_tokens"),
    "--no-async-scheduling": (PLUGIN_DOCS, "speculation is mutually exclusive with async"),
    "--per-request-spec-decode-metrics": (
        VLLM_OBSERVABILITY,
        "per_request_spec_decode_metrics: none | summary | detailed (arg_utils.py registers it; "
        "config/vllm.py refuses it without a speculative config)",
    ),
    "--additional-config": (DESIGN, '{"neuron_config": {"on_device_sampling_config": ...}}'),
}
# Keys inside the JSON values, with their sources.
SPECULATIVE_CONFIG_KEYS = {
    "method": PLUGIN_DOCS,  # "eagle3"; "dflash" in the DFlash section
    "model": PLUGIN_DOCS,
    "num_speculative_tokens": PLUGIN_DOCS,
}
ADDITIONAL_CONFIG = {"neuron_config": {"on_device_sampling_config": {"all_greedy": True}}}  # DESIGN
# NxD Inference / vllm-neuron 0.2.x keys that 1.x does not take (upstream-facts, 2026-11-25).
NXDI_ONLY = ("override_neuron_config", "save_sharded_checkpoint", "enable_fused_speculation")
ENV_SOURCES = {
    "NEURON_COMPILED_ARTIFACTS": PLUGIN_DOCS,  # "Pre-compiled model artifacts"
    # aws-neuron/aws-neuron-sdk: about-neuron/arch/neuron-features/logical-neuroncore-config.rst
    "NEURON_LOGICAL_NC_CONFIG": "aws-neuron/aws-neuron-sdk:logical-neuroncore-config.rst",
}


def _spec(**changes: object) -> ServingSpec:
    base = ServingSpec(
        service_name="qwen-sd-vllm",
        generation=Generation.NEURON_PLUGIN,
        served_model_name="Qwen/Qwen3-32B",
        target_model="/models/checkpoints/Qwen/Qwen3-32B",
        port=8000,
        max_num_seqs=4,
        max_model_len=1024,
        block_size=32,
        draft_model="/models/checkpoints/RedHatAI/Qwen3-32B-speculator.eagle3",
        num_speculative_tokens=5,
        speculative_method="eagle3",
        tensor_parallel_size=32,
        logical_neuron_cores=2,
        claimed_logical_cores=32,
        compiled_artifacts_path="/models/compiled/qwen-sd-vllm",
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def _baseline() -> ServingSpec:
    return _spec(
        service_name="qwen-vllm",
        draft_model=None,
        num_speculative_tokens=None,
        speculative_method=None,
        compiled_artifacts_path="/models/compiled/qwen-vllm",
    )


def _dflash() -> ServingSpec:
    return _spec(
        draft_model="/models/checkpoints/z-lab/Qwen3-4B-DFlash-b16",
        speculative_method="dflash",
        num_speculative_tokens=15,
        tensor_parallel_size=8,
        claimed_logical_cores=8,
        chunked_prefill=False,
    )


SPECS = {"eagle3": _spec, "baseline": _baseline, "dflash": _dflash}


@pytest.mark.parametrize("which", sorted(SPECS))
def test_every_rendered_flag_has_a_cited_source(which: str) -> None:
    command = render(SPECS[which]())
    unsourced = sorted(set(command.flags()) - set(FLAG_SOURCES))
    assert unsourced == [], f"flags rendered without a cited source: {unsourced}"
    assert set(command.env) == set(ENV_SOURCES)


def test_the_server_module_is_the_one_the_plugin_docs_start() -> None:
    # PLUGIN_DOCS: `python3 -m vllm.entrypoints.openai.api_server --model ...`
    assert render(_spec()).module == "vllm.entrypoints.openai.api_server"


@pytest.mark.parametrize("which", sorted(SPECS))
def test_no_nxdi_only_key_anywhere(which: str) -> None:
    command = render(SPECS[which]())
    text = shlex.join(command.args)
    assert [key for key in NXDI_ONLY if key in text] == []
    assert "--override-neuron-config" not in command.flags()
    assert "VLLM_NEURON_FRAMEWORK" not in command.env  # selects NxD Inference on the fork


def test_eagle3_arm_matches_the_documented_example() -> None:
    flags = render(_spec()).flags()
    speculative = json.loads(flags["--speculative-config"] or "")
    assert set(speculative) == set(SPECULATIVE_CONFIG_KEYS)
    assert speculative == {
        "method": "eagle3",
        "model": "/models/checkpoints/RedHatAI/Qwen3-32B-speculator.eagle3",
        "num_speculative_tokens": 5,
    }
    assert json.loads(flags["--additional-config"] or "") == ADDITIONAL_CONFIG
    assert "--no-async-scheduling" in flags
    assert "--no-enable-prefix-caching" in flags
    # ceil(1024 / 32) * 4: the rule is unchanged from the fork era.
    assert flags["--num-gpu-blocks-override"] == "128" == str(num_gpu_blocks_override(_spec()))
    assert "--no-enable-chunked-prefill" not in flags  # only where DFlash needs it


def test_baseline_has_the_same_neuron_config_and_no_decoding_flags() -> None:
    base, spec = render(_baseline()).flags(), render(_spec()).flags()
    assert "--speculative-config" not in base
    assert "--no-async-scheduling" not in base  # async scheduling stays on without a draft
    assert base["--additional-config"] == spec["--additional-config"]
    assert base["--no-enable-prefix-caching"] is None
    assert set(spec) - set(base) == {
        "--speculative-config",
        "--no-async-scheduling",
        "--per-request-spec-decode-metrics",
    }


def test_dflash_renders_its_required_flags() -> None:
    flags = render(_dflash()).flags()
    # features-guide.md, DFlash "Required settings" and dflash.py's refusals.
    for flag in (
        "--no-async-scheduling",
        "--no-enable-prefix-caching",
        "--no-enable-chunked-prefill",
    ):
        assert flag in flags, flag
    assert json.loads(flags["--speculative-config"] or "")["method"] == "dflash"


def test_prefix_caching_on_is_said_explicitly() -> None:
    flags = render(_spec(prefix_caching=True)).flags()
    assert "--enable-prefix-caching" in flags
    assert "--no-enable-prefix-caching" not in flags
