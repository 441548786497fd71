"""``model_store``: the S3 bucket of checkpoints and compiled artifacts."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, field_validator

from experiment.config.base import Section


class ModelStoreConfig(Section):
    """S3 bucket holding Hugging Face checkpoints and compiled Neuron artifacts."""

    bucket_name: str | None = Field(
        default=None,
        description=(
            "S3 bucket name (3-63 lowercase letters, digits, dots, hyphens); null: "
            "CloudFormation generates a unique name."
        ),
    )
    retain_on_delete: bool = Field(
        default=True, description="Keep the bucket and its objects when the stack is deleted."
    )
    noncurrent_version_expiration_days: Annotated[int, Field(ge=1)] = Field(
        default=30, description="Days before a noncurrent object version is deleted; 1 or more."
    )
    checkpoints_prefix: str = Field(
        default="checkpoints",
        description="Key prefix of the Hugging Face checkpoints in the bucket.",
    )
    compiled_prefix: str = Field(
        default="compiled", description="Key prefix of the compiled Neuron artifacts in the bucket."
    )
    mount_path: Annotated[str, Field(pattern=r"^/[^\s]*$")] = Field(
        default="/models",
        description="Absolute path the bucket is mounted at inside the serving pods.",
    )

    @field_validator("bucket_name")
    @classmethod
    def _bucket(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", value):
            raise ValueError(
                f"model_store.bucket_name {value!r} is not a valid S3 bucket name "
                "(3-63 lowercase letters, digits, dots, hyphens)"
            )
        return value
