"""Turn a plain manifest dict into a cdk8s ApiObject.

Manifests are built as plain dicts by pure functions (easy to test and to diff between
arms without jsii); this is the one place they become cdk8s constructs.
"""

from __future__ import annotations

from typing import Any

import cdk8s
from constructs import Construct

TOP_LEVEL = ("apiVersion", "kind", "metadata")


def api_object(scope: Construct, construct_id: str, body: dict[str, Any]) -> cdk8s.ApiObject:
    obj = cdk8s.ApiObject(
        scope, construct_id, api_version=body["apiVersion"], kind=body["kind"],
        metadata=body["metadata"],
    )  # fmt: skip
    for key, value in body.items():
        if key not in TOP_LEVEL:
            obj.add_json_patch(cdk8s.JsonPatch.add(f"/{key}", value))
    return obj
