"""``tuning``: the (draft, k) sweeps of ``python -m tune``."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from experiment.config.base import Section


class TuningConfig(Section):
    """``python -m tune`` (docs/tuning.md): which (draft, k) to measure, which k to predict.

    Every candidate is measured at ``fit_k`` (they calibrate the step-cost model; the largest
    gives the per-position acceptance) and at ``holdout_k`` (predicted without their data,
    then measured: the check). Every k in 1..predict_k_max gets a prediction.
    """

    # trn2 candidates (each (draft, k) is one fused compile); the local run uses the drafts
    # of local.generator instead.
    drafts: list[str] = Field(default_factory=lambda: ["Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B"])
    fit_k: list[int] = Field(default_factory=lambda: [2, 8])
    holdout_k: list[int] = Field(default_factory=lambda: [4, 6])
    predict_k_max: Annotated[int, Field(ge=1, le=15)] = 10
    concurrency: list[int] = Field(default_factory=lambda: [1, 2, 4])  # break-even levels
    # 32 local prompts x 1 x 64 tokens keeps a 2-draft x 4-k sweep near 15 min on 2 cores.
    requests_per_prompt: Annotated[int, Field(ge=1)] = 1
    max_tokens: Annotated[int, Field(ge=4)] | None = 64  # None: local.max_tokens
    budget_s: Annotated[float, Field(gt=0)] = 1200.0  # local sweep wall clock
    port: Annotated[int, Field(ge=1024, le=65535)] = 8601  # one local server at a time
    # trn2 plan: hours one fused compile and one arm's measurement take on a node.
    compile_hours: Annotated[float, Field(gt=0)] = 2.0
    measure_hours: Annotated[float, Field(gt=0)] = 0.5
    budget_node_hours: Annotated[float, Field(gt=0)] = 48.0
    # Deploy every candidate (tuning.drafts x measured k) as its own arm next to the two
    # arms of the comparison (charts/app.py); off: only the comparison is deployed.
    deploy: bool = False

    @model_validator(mode="after")
    def _ks(self) -> TuningConfig:
        for name, ks in (("fit_k", self.fit_k), ("holdout_k", self.holdout_k)):
            if any(not 1 <= k <= 15 for k in ks) or len(set(ks)) != len(ks):
                raise ValueError(f"tuning.{name} {ks}: distinct values of k between 1 and 15")
        if len(self.fit_k) < 2:
            raise ValueError(
                f"tuning.fit_k {self.fit_k}: the step-cost model needs two values of k at "
                "least, e.g. [2, 8]"
            )
        if set(self.fit_k) & set(self.holdout_k):
            raise ValueError(
                f"tuning.holdout_k {self.holdout_k} overlaps fit_k {self.fit_k}: a held-out k "
                "must not be used to fit the model it checks"
            )
        if self.holdout_k and max(self.holdout_k) > max(self.fit_k):
            raise ValueError(
                f"tuning.holdout_k {self.holdout_k}: every held-out k must be below the largest "
                f"fit k ({max(self.fit_k)}), whose run measures the acceptance of each position"
            )
        if not self.drafts or len(set(self.drafts)) != len(self.drafts):
            raise ValueError(f"tuning.drafts {self.drafts}: name one or more distinct drafts")
        if not self.concurrency or min(self.concurrency) < 1:
            raise ValueError(f"tuning.concurrency {self.concurrency}: levels of 1 or more")
        return self

    @property
    def measured_k(self) -> list[int]:
        return sorted({*self.fit_k, *self.holdout_k})
