"""cdk8s charts: the two vLLM services, DRA claim, S3 model store and load-test Job."""

from charts.app import build_charts
from charts.inputs import ClusterInputs

__all__ = ["ClusterInputs", "build_charts"]
