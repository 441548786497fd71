"""``model_store``: the S3 bucket of checkpoints and compiled artifacts."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, field_validator

from experiment.config.base import Section


class ModelStoreConfig(Section):
    """S3 bucket holding Hugging Face checkpoints and compiled Neuron artifacts."""

    bucket_name: str | None = None  # None: CloudFormation generates a unique name
    retain_on_delete: bool = True
    noncurrent_version_expiration_days: Annotated[int, Field(ge=1)] = 30
    checkpoints_prefix: str = "checkpoints"
    compiled_prefix: str = "compiled"
    mount_path: Annotated[str, Field(pattern=r"^/[^\s]*$")] = "/models"  # absolute, in the pod

    @field_validator("bucket_name")
    @classmethod
    def _bucket(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", value):
            raise ValueError(
                f"model_store.bucket_name {value!r} is not a valid S3 bucket name "
                "(3-63 lowercase letters, digits, dots, hyphens)"
            )
        return value
