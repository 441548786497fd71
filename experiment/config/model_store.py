"""``model_store``: the S3 bucket of checkpoints and compiled artifacts."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Annotated

from pydantic import Field, field_validator

from experiment.config.base import Section, ServiceAccountName

# A hub commit id: the "sha" the hub answers for a revision (huggingface_hub hf_api.py,
# HfApi.model_info -> ModelInfo.sha; runtime/model_import.py resolves revisions with it). A branch
# or tag can move; only a commit names the same files on every deploy.
HUB_COMMIT = re.compile(r"[0-9a-f]{40}")
_REVISIONS_KEY = "model_store.hub_revisions"


def hub_revisions_missing(models: Iterable[str], endpoint: str) -> str:
    """What synth says when imported models have no commit in ``model_store.hub_revisions``."""
    models = list(models)
    pages = ", ".join(f"{endpoint}/{model}/commits/main" for model in models)
    example = json.dumps({model: "<40-hex commit>" for model in models}, separators=(",", ":"))
    return (
        f"{_REVISIONS_KEY} needs a commit for {models}: the model import Job pulls these "
        "checkpoints from the hub, and only a commit (40 lower-case hex digits; a branch or tag "
        "moves) makes two deploys serve the same weights. `make pins` records the commit of "
        "each model's main branch (the hub API's revision, GET "
        f"{endpoint}/api/models/<id>/revision/main); by hand: read the commit you mean to serve "
        f"on each model's 'Files and versions' page (its history: {pages}) and set -c "
        f"'experiment.{_REVISIONS_KEY}={example}' (JSON: model ids hold dots), or set "
        "model_store.import_checkpoints false and upload the checkpoints yourself"
    )


_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


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
    import_checkpoints: bool = Field(
        default=True,
        description=(
            "cdk deploy runs a Job that pulls the target and draft(s) from the model hub into "
            "checkpoints/<id>/, and the serving pods wait for it; false: upload them yourself."
        ),
    )
    hub_endpoint: Annotated[str, Field(pattern=r"^https://[^\s/]+(/[^\s]*)?$")] = Field(
        default="https://huggingface.co",
        description="Base URL of the model hub the import Job pulls from (HTTPS, port 443).",
    )
    hub_token_secret: str | None = Field(
        default=None,
        description=(
            "Name of a Secret in serving.namespace whose key 'token' holds a hub token, for "
            "gated or private models; you create it, no manifest contains the token. null: "
            "no token."
        ),
    )
    hub_revisions: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Model id -> hub revision to import. cdk synth requires a commit (40 hex digits) "
            "for every model the import Job pulls (target, draft, deployed tuning drafts); "
            "local tools accept a branch or tag, and unlisted models import 'main'."
        ),
    )
    import_timeout_minutes: Annotated[int, Field(ge=1)] = Field(
        default=240,
        description=(
            "Minutes the import Job may run (activeDeadlineSeconds), also how long the serving "
            "pods wait for it; 1 or more."
        ),
    )
    import_retries: Annotated[int, Field(ge=0, le=10)] = Field(
        default=2,
        description="The import Job's backoffLimit (0-10); a retry keeps the verified files.",
    )
    import_service_account: ServiceAccountName = Field(
        default="model-import",
        description=(
            "Service account of the import Job; Pod Identity binds it to the role that may "
            "write only under checkpoints/ of the bucket."
        ),
    )
    import_cpu: Annotated[int, Field(ge=1)] = Field(
        default=4, description="CPUs of the import pod (request = limit); 1 or more."
    )
    import_memory_gib: Annotated[int, Field(ge=1)] = Field(
        default=8, description="Memory of the import pod in GiB (request = limit); 1 or more."
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

    @field_validator("hub_token_secret")
    @classmethod
    def _secret_name(cls, value: str | None) -> str | None:
        # A Secret's name is a DNS subdomain (kubernetes.io/docs/concepts/configuration/secret).
        if value is not None and not (len(value) <= 253 and _DNS_SUBDOMAIN.fullmatch(value)):
            raise ValueError(
                f"model_store.hub_token_secret {value!r} is not a valid Kubernetes Secret "
                "name: use lowercase letters, digits, '-' and '.', starting and ending with a "
                "letter or digit"
            )
        return value
