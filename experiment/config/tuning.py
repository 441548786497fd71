"""``tuning``: the (draft, k) sweeps of ``python -m tune``."""

from __future__ import annotations

from collections.abc import Collection
from typing import Annotated

from pydantic import Field, model_validator

from experiment.config.base import Section
from experiment.config.local import Drafter
from experiment.config.profiles import PROFILES, ServingProfile

DEFAULT_DRAFTERS: list[Drafter] = ["draft-model"]

# Defaults are the serving profile's (ExperimentConfig._profile_tuning_defaults); these are
# the reproduce profile's, for a tuning section built on its own.
_REPRODUCE = PROFILES[ServingProfile.REPRODUCE]


class TuningConfig(Section):
    """``python -m tune`` (docs/tuning.md): which (draft, k) to measure, which k to predict.

    Every candidate is measured at ``fit_k`` (they calibrate the step-cost model; the largest
    gives the per-position acceptance) and at ``holdout_k`` (predicted without their data,
    then measured: the check). Every k in 1..predict_k_max gets a prediction.
    """

    drafts: list[str] = Field(
        default_factory=lambda: list(_REPRODUCE.tuning_drafts),
        description=(
            "trn2 draft candidates, distinct (each (draft, k) is one compile); default: the "
            "serving profile's; the local run uses local.generator.drafts instead."
        ),
    )
    # Draft-model only by default: the sweep's time and outputs stay what they were.
    drafters: list[Drafter] = Field(
        default_factory=lambda: list(DEFAULT_DRAFTERS),
        description=(
            "Local drafters the sweep compares: draft-model (every local.generator.drafts "
            "entry) and/or eagle3 (the head of local.eagle3); distinct, one or more."
        ),
    )
    local_drafts: list[str] | None = Field(
        default=None,
        description=(
            "Which local.generator.drafts entries the local sweep measures when drafters "
            "include draft-model, distinct, one or more; null: every entry."
        ),
    )
    fit_k: list[int] = Field(
        default_factory=lambda: list(_REPRODUCE.fit_k),
        description=(
            "Values of k that calibrate the step-cost model: 2 or more, distinct, "
            "1-15; the largest also gives per-position acceptance."
        ),
    )
    holdout_k: list[int] = Field(
        default_factory=lambda: list(_REPRODUCE.holdout_k),
        description=(
            "Values of k predicted without their data, then measured: the check. "
            "Distinct, 1-15, none in fit_k, each below max(fit_k)."
        ),
    )
    predict_k_max: Annotated[int, Field(ge=1, le=15)] = Field(
        default=_REPRODUCE.k_range[1],
        description=(
            "Every k from the profile's lowest (reproduce 1, new-deployment 3) to this gets a "
            "prediction; 1-15."
        ),
    )
    concurrency: list[int] = Field(
        default_factory=lambda: [1, 2, 4],
        description="Concurrency levels of the break-even analysis; 1 or more each.",
    )
    # 32 local prompts x 1 x 64 tokens keeps a 2-draft x 4-k sweep near 15 min on 2 cores.
    requests_per_prompt: Annotated[int, Field(ge=1)] = Field(
        default=1, description="Measured requests per prompt of each local sweep point."
    )
    max_tokens: Annotated[int, Field(ge=4)] | None = Field(
        default=64,
        description=(
            "Output tokens per request of the local sweep, 4 or more; null: local.max_tokens."
        ),
    )
    budget_s: Annotated[float, Field(gt=0)] = Field(
        default=1200.0, description="Wall-clock budget of the local sweep, seconds."
    )
    port: Annotated[int, Field(ge=1024, le=65535)] = Field(
        default=8601, description="Port of the one local server the sweep runs at a time."
    )
    compile_hours: Annotated[float, Field(gt=0)] = Field(
        default=2.0, description="trn2 plan: node hours one fused compile takes."
    )
    measure_hours: Annotated[float, Field(gt=0)] = Field(
        default=0.5, description="trn2 plan: node hours one arm's measurement takes."
    )
    budget_node_hours: Annotated[float, Field(gt=0)] = Field(
        default=48.0, description="trn2 plan: node hours the sweep may use."
    )
    deploy: bool = Field(
        default=False,
        description=(
            "Deploy every candidate (tuning.drafts x measured k) as its own arm next "
            "to the comparison's two; off: only the comparison."
        ),
    )

    @model_validator(mode="after")
    def _ks_distinct_and_in_range(self) -> TuningConfig:
        for name, ks in (("fit_k", self.fit_k), ("holdout_k", self.holdout_k)):
            if any(not 1 <= k <= 15 for k in ks) or len(set(ks)) != len(ks):
                raise ValueError(f"tuning.{name} {ks}: distinct values of k between 1 and 15")
        return self

    @model_validator(mode="after")
    def _fit_k_has_two_values(self) -> TuningConfig:
        if len(self.fit_k) < 2:
            raise ValueError(
                f"tuning.fit_k {self.fit_k}: the step-cost model needs two values of k at "
                "least, e.g. [2, 8]"
            )
        return self

    @model_validator(mode="after")
    def _holdout_k_not_in_fit_k(self) -> TuningConfig:
        if set(self.fit_k) & set(self.holdout_k):
            raise ValueError(
                f"tuning.holdout_k {self.holdout_k} overlaps fit_k {self.fit_k}: a held-out k "
                "must not be used to fit the model it checks"
            )
        return self

    @model_validator(mode="after")
    def _holdout_k_below_largest_fit_k(self) -> TuningConfig:
        if self.holdout_k and max(self.holdout_k) > max(self.fit_k):
            raise ValueError(
                f"tuning.holdout_k {self.holdout_k}: every held-out k must be below the largest "
                f"fit k ({max(self.fit_k)}), whose run measures the acceptance of each position"
            )
        return self

    @model_validator(mode="after")
    def _drafts_distinct(self) -> TuningConfig:
        if not self.drafts or len(set(self.drafts)) != len(self.drafts):
            raise ValueError(f"tuning.drafts {self.drafts}: name one or more distinct drafts")
        return self

    @model_validator(mode="after")
    def _drafters_distinct(self) -> TuningConfig:
        if not self.drafters or len(set(self.drafters)) != len(self.drafters):
            raise ValueError(
                f"tuning.drafters {self.drafters}: name one or more distinct drafters, e.g. "
                "[draft-model, eagle3]"
            )
        return self

    def local_drafts_problem(self, drafts: Collection[str]) -> str | None:
        """What is wrong with local_drafts against local.generator.drafts (None: nothing);
        ExperimentConfig reports it, since it reads both sections."""
        chosen = self.local_drafts
        if chosen is None:
            return None
        unknown = sorted(set(chosen) - set(drafts))
        if not chosen or len(set(chosen)) != len(chosen) or unknown:
            return (
                f"tuning.local_drafts {chosen}: name one or more distinct entries of "
                f"local.generator.drafts {sorted(drafts)}, or null for all of them"
            )
        return None

    @model_validator(mode="after")
    def _concurrency_levels_positive(self) -> TuningConfig:
        if not self.concurrency or min(self.concurrency) < 1:
            raise ValueError(f"tuning.concurrency {self.concurrency}: levels of 1 or more")
        return self

    @property
    def measured_k(self) -> list[int]:
        return sorted({*self.fit_k, *self.holdout_k})
