"""What the charts' tests pass to ``python -m charts``: the Prometheus workspace URL (an AMP
query URL's form) and the deploy pins it requires, as cdk synth does."""

import json

PROMETHEUS_URL = "https://aps-workspaces.us-east-2.amazonaws.com/workspaces/ws-example/"
# Placeholders of the right form (nothing is downloaded): the Gateway API plugin's digest, the
# two add-on versions, a hub commit per checkpoint any profile imports.
HUB_COMMITS = {
    "Qwen/Qwen3-32B": "1" * 40,
    "Qwen/Qwen3-1.7B": "2" * 40,
    "Qwen/Qwen3-0.6B": "3" * 40,
    "RedHatAI/Qwen3-32B-speculator.eagle3": "4" * 40,
}
DEPLOY_PINS = [
    "-c", "routing.eks.gateway_api_plugin_sha256=" + "0" * 64,
    "-c", "cluster.s3_csi_addon_version=v2.1.0-eksbuild.1",
    "-c", "cluster.cloudwatch_addon_version=v4.1.0-eksbuild.1",
    "-c", f"model_store.hub_revisions={json.dumps(HUB_COMMITS)}",
]  # fmt: skip
