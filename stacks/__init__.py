"""The AWS CDK app: network, model store, EKS cluster with Neuron DRA, observability.

``build_app`` is the one entry point (``app.py`` calls it, the tests call it):
it validates the configuration before creating a single construct.
"""

from stacks.app import build_app, create_stacks

__all__ = ["build_app", "create_stacks"]
