"""cdk8s charts: the two vLLM services, DRA claim, S3 model store and load-test Job.

The package names load on first use (PEP 562): modules that render plain dicts (the gateway
and rollout manifests, the runtime package listing) import without cdk8s, so the light test
tier (`make test-fast`) can run their tests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from charts.app import build_charts
    from charts.inputs import ClusterInputs

__all__ = ["ClusterInputs", "build_charts"]


def __getattr__(name: str) -> Any:
    if name == "build_charts":
        from charts.app import build_charts

        return build_charts
    if name == "ClusterInputs":
        from charts.inputs import ClusterInputs

        return ClusterInputs
    raise AttributeError(f"module 'charts' has no attribute {name!r}")
