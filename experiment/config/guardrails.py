"""``guardrails``: alarm thresholds of the Observability stack."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, field_validator

from experiment.config.base import Section

_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")


class GuardrailConfig(Section):
    """Alarm thresholds of the Observability stack (stacks/alarms.py), checked per run."""

    min_acceptance_rate: Annotated[float, Field(gt=0, le=1)] = Field(
        default=0.3,
        description=(
            "Alarm when the SD arm's acceptance (accepted / proposed draft tokens) of"
            " a prompt class falls below this; above 0, at most 1."
        ),
    )
    max_failed_request_share: Annotated[float, Field(ge=0, lt=1)] = Field(
        default=0.01, description="Alarm when an arm's failed / sent requests exceed this; 0 to <1."
    )
    # Not 1: greedy outputs on Neuron diverge even between two baselines that differ only in
    # KV-cache settings (vllm-neuron's DFlash bench notes), so one late divergence must not
    # fire the alarm; one prompt of 16 diverging at its first token (15/16 = 0.94) does.
    lossless_min_prefix_agreement: Annotated[float, Field(gt=0, le=1)] = Field(
        default=0.95,
        description=(
            "Alarm when the SD arm reproduces less than this share of the baseline's greedy"
            " output before diverging (tokens before each prompt's first divergence / tokens"
            " compared, at temperature 0); above 0, at most 1. The local CPU run is bit-exact"
            " and keeps exact match as its bar."
        ),
    )
    period_minutes: Annotated[int, Field(ge=1, le=1440)] = Field(
        default=5, description="Alarm period, minutes; 1-1440."
    )
    evaluation_periods: Annotated[int, Field(ge=1)] = Field(
        default=1, description="Periods an alarm evaluates."
    )
    alarm_email: str | None = Field(
        default=None,
        description="E-mail address subscribed to the alarms; null: alarms without notification.",
    )

    @field_validator("alarm_email")
    @classmethod
    def _email(cls, value: str | None) -> str | None:
        if value is not None and not _EMAIL.fullmatch(value):
            raise ValueError(
                f"guardrails.alarm_email {value!r} is not an e-mail address such as "
                "'oncall@example.com'"
            )
        return value
