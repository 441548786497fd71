"""``local.generator``: the tiny generated Qwen3 target/draft pair of the local run."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator

from experiment.config.base import Section

# Head sizes vLLM's CPU attention backend implements (vllm/v1/attention/backends/cpu_attn.py).
CPU_ATTENTION_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


class TinyModelShape(Section):
    """Shape of one generated Qwen3-architecture model of the local run."""

    hidden_size: Annotated[int, Field(ge=32)]
    intermediate_size: Annotated[int, Field(ge=32)]
    num_layers: Annotated[int, Field(ge=1)]
    num_heads: Annotated[int, Field(ge=1)]
    num_kv_heads: Annotated[int, Field(ge=1)]
    head_dim: int = 32

    @model_validator(mode="after")
    def _heads(self) -> TinyModelShape:
        if self.head_dim not in CPU_ATTENTION_HEAD_SIZES:
            raise ValueError(
                f"head_dim {self.head_dim} is not served by vLLM's CPU attention; use one of "
                f"{list(CPU_ATTENTION_HEAD_SIZES)}"
            )
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
    hidden_size: Annotated[int, Field(ge=32)] = 128
    intermediate_size: Annotated[int, Field(ge=32)] = 384
    num_layers: Annotated[int, Field(ge=1)] = 4
    num_heads: Annotated[int, Field(ge=1)] = 4
    num_kv_heads: Annotated[int, Field(ge=1)] = 2


class DraftShape(TinyModelShape):
    hidden_size: Annotated[int, Field(ge=32)] = 64
    intermediate_size: Annotated[int, Field(ge=32)] = 192
    num_layers: Annotated[int, Field(ge=1)] = 2
    num_heads: Annotated[int, Field(ge=1)] = 2
    num_kv_heads: Annotated[int, Field(ge=1)] = 1
    # Weights read per draft step as a share of the served target's, reached by zero-output
    # MLP padding like the target's; 0 = unpadded. The default draft reads 1.5%: its passes
    # then cost some memory bandwidth like the target's step, which keeps the open-ended
    # speedup near 1 on a machine with less bandwidth per core; every padded byte is also
    # paid k times before the first token, so more costs TTFT (measured: 1% gave open-ended
    # 1.19x / TTFT 0.89x, 2% 1.09x / 0.79x; docs/local-run.md, "Choosing the draft").
    weight_share: Annotated[float, Field(ge=0, lt=0.5)] = 0.0


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

    # Served MLP width; 0 = unpadded. 12288: 147 MiB read per step, a step still bound by
    # weight reads on every machine measured, and a cached `make local` under 4 minutes on
    # the slower one (16384: 195 MiB, 4 min 14 s there; docs/local-run.md).
    intermediate_size: Annotated[int, Field(ge=0)] = 12288
    extra_layers: Annotated[int, Field(ge=0)] = 4


class DistillationConfig(Section):
    """The drafts also learn the target's own greedy continuations of structured chat prompts
    (never the load test's prompts), as a same-family draft agrees with its target there."""

    prompts: Annotated[int, Field(ge=0)] = 512  # 0 = train the drafts on the corpus only
    new_tokens: Annotated[int, Field(ge=1)] = 192
    # 400: 2 points of structured agreement below 600 steps, 45 s less of `make local`.
    train_steps: Annotated[int, Field(ge=0)] = 400
    # Rows of each draft batch cut from the corpus (the rest from the continuations). 0:
    # the draft learns the target's structured answers only, so it agrees with the target
    # where the text is predictable and seldom on open-ended prose (docs/local-run.md).
    corpus_rows: Annotated[int, Field(ge=0)] = 0


class ModelGeneratorConfig(Section):
    """The tiny target/draft pair of the local run: one locally trained tokenizer, a short
    CPU training pass on structured text. Changing any value generates a new pair."""

    vocab_size: Annotated[int, Field(ge=512, le=65536)] = 2048
    target: TargetShape = Field(default_factory=TargetShape)
    padding: TargetPadding = Field(default_factory=TargetPadding)
    # Drafts by name (the experiment's 0.6B vs 1.7B trade-off); `draft` is the one served.
    drafts: dict[str, DraftShape] = Field(default_factory=lambda: dict(DEFAULT_DRAFTS))
    draft: str = "small"
    distillation: DistillationConfig = Field(default_factory=DistillationConfig)
    documents: Annotated[int, Field(ge=100)] = 4000
    train_steps: Annotated[int, Field(ge=0)] = 300
    batch_size: Annotated[int, Field(ge=1)] = 16
    sequence_length: Annotated[int, Field(ge=16)] = 256
    learning_rate: Annotated[float, Field(gt=0, le=0.1)] = 3e-3
    # PyTorch threads for generating the models; None = every core this process may use.
    # Not part of the cache key: the weights are byte-identical on 1 and 2 threads
    # (test_local_models.py), and nothing else runs while they are generated.
    threads: Annotated[int, Field(ge=1)] | None = None

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
    def _draft_smaller(self) -> ModelGeneratorConfig:
        if self.draft not in self.drafts:
            raise ValueError(
                f"local.generator.draft {self.draft!r} is not one of local.generator.drafts "
                f"{sorted(self.drafts)}; name one of them or add an entry"
            )
        for name, shape in self.drafts.items():
            if shape.size_score >= self.target.size_score:
                raise ValueError(
                    f"local.generator.drafts.{name} must be smaller than local.generator.target "
                    "(fewer layers or a narrower hidden size); a draft as large as its target "
                    "cannot speed it up"
                )
        distillation = self.distillation
        if distillation.prompts and distillation.corpus_rows > self.batch_size:
            raise ValueError(
                f"local.generator.distillation.corpus_rows {distillation.corpus_rows} exceeds "
                f"local.generator.batch_size {self.batch_size}; use at most the batch size"
            )
        if not distillation.prompts and not distillation.corpus_rows:
            raise ValueError(
                "local.generator.distillation.prompts and .corpus_rows are both 0: the drafts "
                "would have nothing to train on; set corpus_rows >= 1 or prompts >= 1"
            )
        padded = self.padding.intermediate_size
        if padded and padded < self.target.intermediate_size:
            raise ValueError(
                f"local.generator.padding.intermediate_size {padded} is narrower than "
                f"local.generator.target.intermediate_size {self.target.intermediate_size}; "
                "use 0 (no padding) or a width at least the target's"
            )
        return self

    @property
    def draft_shape(self) -> DraftShape:
        return self.drafts[self.draft]
