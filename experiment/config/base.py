"""What every section shares: strict parsing of user input, errors reported under a config
path, Kubernetes name types, and the two arms of the comparison."""

from __future__ import annotations

import re
from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any, get_origin

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from runtime import validate as rules

# Validation context of the CDK app and the kubectl path (experiment.loading.build_config(
# for_eks=True)): what only the EKS stacks use and has no safe default is required there, and
# what only the trn2 engines refuse is refused there, not in local runs.
EKS_APP = "eks_app"


class Section(BaseModel):
    # Unknown keys are typos: reject them rather than silently ignoring them. A number given
    # to a string field (`kubernetes_version: 1.35` in YAML, `-c ...=1.35`) is that string.
    model_config = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)

    @model_validator(mode="before")
    @classmethod
    def _as_a_user_writes_it(cls, data: Any) -> Any:
        """Values as they arrive from `-c` and hand-written files, for every section at once:
        a list as comma-separated text (`-c network.availability_zones=us-east-2a,us-east-2b`)
        and one entry of a mapping (`-c loadtest.variant_labels.baseline=Base`), merged over
        the field's default entries as nested sections are merged over theirs."""
        if not isinstance(data, dict):
            return data
        given = dict(data)
        for name, field in cls.model_fields.items():
            value, kind = given.get(name), get_origin(field.annotation)
            if kind is list and isinstance(value, str):
                given[name] = [part.strip() for part in value.split(",") if part.strip()]
            elif kind is dict and isinstance(value, dict) and field.default_factory is not None:
                defaults = field.get_default(call_default_factory=True)
                given[name] = {
                    **defaults,
                    **{
                        key: (
                            {**defaults[key].model_dump(), **entry}
                            if isinstance(defaults.get(key), BaseModel) and isinstance(entry, dict)
                            else entry
                        )
                        for key, entry in value.items()
                    },
                }
        return given


def apply_rule(rule: Callable[[rules.Namer], None], section: str, *loc: str) -> None:
    """Apply one serving rule of runtime/validate.py (their one source, also run in the
    container) to the config, naming fields by their config path (``serving.draft_model``),
    and report its error under that path: ``loc`` is where the calling validator sits."""
    try:
        rule(lambda field: f"{section}.{field}")
    except rules.SpecError as err:
        raise error_at((*loc, err.field) if err.field else loc, str(err)) from None


def error_at(loc: tuple[str, ...], message: str) -> ValidationError:
    """A validation error reported under ``loc`` (relative to the validating model), for
    checks that read several fields but have one field the user must change."""
    problem = PydanticCustomError("value_error", "{message}", {"message": message})
    return ValidationError.from_exception_data(
        "ExperimentConfig", [InitErrorDetails(type=problem, loc=loc, input=None)]
    )


# Kubernetes names (kubernetes.io/docs/concepts/overview/working-with-objects/names): a
# namespace is an RFC 1123 label, a Service an RFC 1035 label (starts with a letter), a
# service account a DNS subdomain.
_RFC1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_RFC1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _kubernetes_name(pattern: re.Pattern[str], max_length: int, kind: str) -> AfterValidator:
    def check(value: str) -> str:
        if len(value) > max_length or not pattern.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a valid Kubernetes {kind}: use at most {max_length} "
                "lowercase letters, digits and '-', starting and ending with a letter or digit"
                + (" (a Service name starts with a letter)" if pattern is _RFC1035_LABEL else "")
            )
        return value

    return AfterValidator(check)


NamespaceName = Annotated[str, _kubernetes_name(_RFC1123_LABEL, 63, "namespace name")]
ServiceName = Annotated[str, _kubernetes_name(_RFC1035_LABEL, 63, "Service name")]
ServiceAccountName = Annotated[str, _kubernetes_name(_DNS_SUBDOMAIN, 253, "service account name")]


class Arm(StrEnum):
    """The two arms of the comparison. Everything else about them is shared."""

    BASELINE = "baseline"
    SPECULATIVE = "speculative"


# The load test's optional third arm: the tiered gateway in front of both serving arms
# (routing). It has no server of its own, so it is not an ``Arm``: the serving arms, their
# Deployments, alarms and dashboard stay two.
TIERED_ARM = "tiered"
