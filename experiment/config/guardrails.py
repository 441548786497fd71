"""``guardrails``: alarm thresholds of the Observability stack."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, field_validator

from experiment.config.base import Section

_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")


class GuardrailConfig(Section):
    """Alarm thresholds of the Observability stack (stacks/alarms.py), checked per run."""

    # SD arm, per prompt class: acceptance (draft tokens accepted / proposed) below this
    # means speculation stopped paying for that class.
    min_acceptance_rate: Annotated[float, Field(gt=0, le=1)] = 0.3
    max_failed_request_share: Annotated[float, Field(ge=0, lt=1)] = 0.01
    # Lossless mismatches (SD output differing from the baseline at temperature 0) tolerated.
    max_lossless_mismatches: Annotated[int, Field(ge=0)] = 0
    period_minutes: Annotated[int, Field(ge=1, le=1440)] = 5
    evaluation_periods: Annotated[int, Field(ge=1)] = 1
    alarm_email: str | None = None  # None: alarms without notification

    @field_validator("alarm_email")
    @classmethod
    def _email(cls, value: str | None) -> str | None:
        if value is not None and not _EMAIL.fullmatch(value):
            raise ValueError(
                f"guardrails.alarm_email {value!r} is not an e-mail address such as "
                "'oncall@example.com'"
            )
        return value
