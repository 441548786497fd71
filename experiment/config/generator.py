"""``local.generator``: the tiny generated Qwen3 target/draft pair of the local run."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator

from experiment.config.base import Section

# Head sizes vLLM's CPU attention backend implements (vllm/v1/attention/backends/cpu_attn.py).
CPU_ATTENTION_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


class TinyModelShape(Section):
    """Shape of one generated Qwen3-architecture model of the local run."""

    hidden_size: Annotated[int, Field(ge=32)] = Field(description="Hidden size; 32 or more.")
    intermediate_size: Annotated[int, Field(ge=32)] = Field(description="MLP width; 32 or more.")
    num_layers: Annotated[int, Field(ge=1)] = Field(description="Transformer layers; 1 or more.")
    num_heads: Annotated[int, Field(ge=1)] = Field(
        description="Attention heads; a multiple of num_kv_heads."
    )
    num_kv_heads: Annotated[int, Field(ge=1)] = Field(
        description="Key/value heads (grouped-query attention)."
    )
    head_dim: int = Field(
        default=32,
        description=(
            "Size of one attention head; one vLLM's CPU attention serves (32, 64, 80, ..., 512)."
        ),
    )

    @model_validator(mode="after")
    def _head_dim_served_on_cpu(self) -> TinyModelShape:
        if self.head_dim not in CPU_ATTENTION_HEAD_SIZES:
            raise ValueError(
                f"head_dim {self.head_dim} is not served by vLLM's CPU attention; use one of "
                f"{list(CPU_ATTENTION_HEAD_SIZES)}"
            )
        return self

    @model_validator(mode="after")
    def _heads_group_evenly(self) -> TinyModelShape:
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads {self.num_heads} must be a multiple of num_kv_heads "
                f"{self.num_kv_heads} (grouped-query attention)"
            )
        return self

    @property
    def size_score(self) -> int:
        # Rough per-token cost, to check the draft is smaller than the target.
        return self.num_layers * (self.hidden_size * self.intermediate_size + self.hidden_size**2)


# Defaults per role, so `-c experiment.local.generator.draft.num_layers=3` changes one field.
class TargetShape(TinyModelShape):
    hidden_size: Annotated[int, Field(ge=32)] = Field(
        default=128, description="Hidden size of the target; 32 or more."
    )
    intermediate_size: Annotated[int, Field(ge=32)] = Field(
        default=384, description="MLP width of the target as trained (see padding); 32 or more."
    )
    num_layers: Annotated[int, Field(ge=1)] = Field(
        default=4, description="Transformer layers of the target; 1 or more."
    )
    num_heads: Annotated[int, Field(ge=1)] = Field(
        default=4, description="Attention heads of the target; a multiple of num_kv_heads."
    )
    num_kv_heads: Annotated[int, Field(ge=1)] = Field(
        default=2, description="Key/value heads of the target."
    )


class DraftShape(TinyModelShape):
    hidden_size: Annotated[int, Field(ge=32)] = Field(
        default=64, description="Hidden size of the draft; 32 or more."
    )
    intermediate_size: Annotated[int, Field(ge=32)] = Field(
        default=192, description="MLP width of the draft; 32 or more."
    )
    num_layers: Annotated[int, Field(ge=1)] = Field(
        default=2, description="Transformer layers of the draft; 1 or more."
    )
    num_heads: Annotated[int, Field(ge=1)] = Field(
        default=2, description="Attention heads of the draft; a multiple of num_kv_heads."
    )
    num_kv_heads: Annotated[int, Field(ge=1)] = Field(
        default=1, description="Key/value heads of the draft."
    )
    # The default draft reads 1.5% (padded like the target's MLP): its passes then cost some
    # memory bandwidth like the target's step, which keeps the open-ended speedup near 1 on a
    # machine with less bandwidth per core; every padded byte is also paid k times before the
    # first token, so more costs TTFT (measured: 1% gave open-ended 1.19x / TTFT 0.89x, 2%
    # 1.09x / 0.79x; docs/local-run.md, "Choosing the draft").
    weight_share: Annotated[float, Field(ge=0, lt=0.5)] = Field(
        default=0.0,
        description=(
            "Weights read per draft step as a share of the served target's, reached "
            "by zero-output MLP padding; 0 (unpadded) to <0.5."
        ),
    )


DEFAULT_DRAFTS = {
    "small": DraftShape(weight_share=0.015),
    "large": DraftShape(
        hidden_size=128, intermediate_size=384, num_heads=4, num_kv_heads=2, weight_share=0.2
    ),
}


class TargetPadding(Section):
    """Weight reads added to the served target without changing its function, so one decode
    step costs what a large model's does (bound by reading weights, not by vLLM's fixed
    overhead): MLP columns whose down-projection is zero and extra layers whose attention
    o_proj and MLP down_proj are zero. Same logits, more bytes read per step."""

    # 12288: 147 MiB read per step, a step still bound by
    # weight reads on every machine measured, and a cached `make local` under 4 minutes on
    # the slower one (16384: 195 MiB, 4 min 14 s there; docs/local-run.md).
    intermediate_size: Annotated[int, Field(ge=0)] = Field(
        default=12288,
        description=(
            "Served MLP width of the target; 0: unpadded, else at least target.intermediate_size."
        ),
    )
    extra_layers: Annotated[int, Field(ge=0)] = Field(
        default=4,
        description=(
            "Function-free layers added to the served target (zero attention o_proj "
            "and MLP down_proj)."
        ),
    )


class DistillationConfig(Section):
    """The drafts also learn the target's own greedy continuations of structured chat prompts
    (never the load test's prompts), as a same-family draft agrees with its target there."""

    prompts: Annotated[int, Field(ge=0)] = Field(
        default=512,
        description=(
            "Structured chat prompts whose target continuations the drafts learn; 0: "
            "train the drafts on the corpus only."
        ),
    )
    new_tokens: Annotated[int, Field(ge=1)] = Field(
        default=192, description="Tokens of each target continuation; 1 or more."
    )
    # 400: 2 points of structured agreement below 600 steps, 45 s less of `make local`.
    train_steps: Annotated[int, Field(ge=0)] = Field(
        default=400, description="Draft training steps on the continuations; 0 or more."
    )
    # 0: the draft learns the target's structured answers only, so it agrees with the target
    # where the text is predictable and seldom on open-ended prose (docs/local-run.md).
    corpus_rows: Annotated[int, Field(ge=0)] = Field(
        default=0,
        description=(
            "Rows of each draft batch cut from the corpus (the rest from the "
            "continuations); at most batch_size."
        ),
    )


class ModelGeneratorConfig(Section):
    """The tiny target/draft pair of the local run: one locally trained tokenizer, a short
    CPU training pass on structured text. Changing any value generates a new pair."""

    vocab_size: Annotated[int, Field(ge=512, le=65536)] = Field(
        default=2048, description="Size of the locally trained tokenizer's vocabulary; 512-65536."
    )
    target: TargetShape = Field(
        default_factory=TargetShape, description="Shape of the target model."
    )
    padding: TargetPadding = Field(
        default_factory=TargetPadding, description="Weight reads added to the served target."
    )
    drafts: dict[str, DraftShape] = Field(
        default_factory=lambda: dict(DEFAULT_DRAFTS),
        description=(
            "Draft shapes by name (the experiment's 0.6B vs 1.7B trade-off); each "
            "smaller than the target."
        ),
    )
    draft: str = Field(default="small", description="Name of the draft in drafts that is served.")
    distillation: DistillationConfig = Field(
        default_factory=DistillationConfig, description="What the drafts learn from the target."
    )
    documents: Annotated[int, Field(ge=100)] = Field(
        default=4000, description="Synthetic training documents; 100 or more."
    )
    train_steps: Annotated[int, Field(ge=0)] = Field(
        default=300, description="Training steps of the target on the corpus; 0 or more."
    )
    batch_size: Annotated[int, Field(ge=1)] = Field(
        default=16, description="Rows per training batch."
    )
    sequence_length: Annotated[int, Field(ge=16)] = Field(
        default=256, description="Tokens per training row; at most local.max_model_len."
    )
    learning_rate: Annotated[float, Field(gt=0, le=0.1)] = Field(
        default=3e-3, description="Learning rate of the training passes; above 0, at most 0.1."
    )
    # Not part of the cache key: the weights are byte-identical on 1 and 2 threads
    # (test_local_models.py), and nothing else runs while they are generated.
    threads: Annotated[int, Field(ge=1)] | None = Field(
        default=None,
        description=(
            "PyTorch threads for generating the models; null: every core this process may use."
        ),
    )

    @field_validator("drafts", mode="before")
    @classmethod
    def _merge_drafts(cls, given: Any) -> Any:
        # An override names only what it changes (`drafts.large.num_layers=3`): merge it over
        # the default entries as every other section is merged over its defaults.
        if not isinstance(given, dict):
            return given
        merged: dict[str, Any] = {k: v.model_dump() for k, v in DEFAULT_DRAFTS.items()}
        for name, shape in given.items():
            fields = shape.model_dump() if isinstance(shape, DraftShape) else shape
            merged[name] = {**merged.get(name, {}), **fields} if isinstance(fields, dict) else shape
        return merged

    @model_validator(mode="after")
    def _served_draft_is_named(self) -> ModelGeneratorConfig:
        if self.draft not in self.drafts:
            raise ValueError(
                f"local.generator.draft {self.draft!r} is not one of local.generator.drafts "
                f"{sorted(self.drafts)}; name one of them or add an entry"
            )
        return self

    @model_validator(mode="after")
    def _drafts_smaller_than_target(self) -> ModelGeneratorConfig:
        for name, shape in self.drafts.items():
            if shape.size_score >= self.target.size_score:
                raise ValueError(
                    f"local.generator.drafts.{name} must be smaller than local.generator.target "
                    "(fewer layers or a narrower hidden size); a draft as large as its target "
                    "cannot speed it up"
                )
        return self

    @model_validator(mode="after")
    def _corpus_rows_fit_the_batch(self) -> ModelGeneratorConfig:
        distillation = self.distillation
        if distillation.prompts and distillation.corpus_rows > self.batch_size:
            raise ValueError(
                f"local.generator.distillation.corpus_rows {distillation.corpus_rows} exceeds "
                f"local.generator.batch_size {self.batch_size}; use at most the batch size"
            )
        return self

    @model_validator(mode="after")
    def _drafts_have_training_data(self) -> ModelGeneratorConfig:
        distillation = self.distillation
        if not distillation.prompts and not distillation.corpus_rows:
            raise ValueError(
                "local.generator.distillation.prompts and .corpus_rows are both 0: the drafts "
                "would have nothing to train on; set corpus_rows >= 1 or prompts >= 1"
            )
        return self

    @model_validator(mode="after")
    def _padding_at_least_target_width(self) -> ModelGeneratorConfig:
        padded = self.padding.intermediate_size
        if padded and padded < self.target.intermediate_size:
            raise ValueError(
                f"local.generator.padding.intermediate_size {padded} is narrower than "
                f"local.generator.target.intermediate_size {self.target.intermediate_size}; "
                "use 0 (no padding) or a width at least the target's"
            )
        return self
