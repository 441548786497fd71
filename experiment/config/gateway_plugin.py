"""The Gateway API traffic-router plugin the Argo Rollouts controller downloads and runs
(stacks/gateway.py), and the setting that verifies it, ``routing.eks.gateway_api_plugin_sha256``.
"""

from __future__ import annotations

import re

from experiment.config.upstreams import pin

# argoproj-labs/rollouts-plugin-trafficrouter-gatewayapi tag v0.15.0 (96c63fd7), the asset for
# the x86_64 system nodes the controller runs on. The release workflow
# (.github/workflows/release.yaml) uploads the binaries and no checksums file: the digest is
# the one GitHub computes for every release asset at upload (github/roadmap#1136, shipped
# 2025-06; the REST API's release assets carry it as "digest": "sha256:<hex>"), which
# `python -m experiment pins` reads (experiment/pins/resolve.py) or, for an asset without
# one, computes by downloading the asset.
GATEWAY_API_PLUGIN_VERSION = pin("gateway-api-plugin")
GATEWAY_API_PLUGIN_ASSET = "gatewayapi-plugin-linux-amd64"
GATEWAY_API_PLUGIN_REPO = "argoproj-labs/rollouts-plugin-trafficrouter-gatewayapi"
GATEWAY_API_PLUGIN_RELEASES = f"https://github.com/{GATEWAY_API_PLUGIN_REPO}/releases"
GATEWAY_API_PLUGIN_URL = (
    f"{GATEWAY_API_PLUGIN_RELEASES}/download/{GATEWAY_API_PLUGIN_VERSION}/"
    f"{GATEWAY_API_PLUGIN_ASSET}"
)
# Argo Rollouts checks a plugin's SHA-256 only as 64 lower-case hex digits (argo-rollouts v1.9.1
# utils/plugin/downloader.go, checkShaOfPlugin: it compares fmt "%x" of the digest as a string).
SHA256_HEX = re.compile(r"[0-9a-f]{64}")
_KEY = "routing.eks.gateway_api_plugin_sha256"

PLUGIN_SHA256_HELP = (
    f"SHA-256 (64 lower-case hex digits) of the {GATEWAY_API_PLUGIN_ASSET} asset of the Gateway "
    f"API traffic-router plugin's release {GATEWAY_API_PLUGIN_VERSION}, as its release page lists "
    "it; required by cdk synth. Argo Rollouts refuses a downloaded plugin that does not match."
)
DIGEST_MISSING = (
    f"{_KEY} is required: the Argo Rollouts controller downloads the Gateway API "
    f"traffic-router plugin {GATEWAY_API_PLUGIN_VERSION} and runs it, and only this digest makes "
    f"it refuse a binary that is not the release's. `make pins` records it; by hand: the SHA-256 "
    f"of {GATEWAY_API_PLUGIN_ASSET} on the release page, {GATEWAY_API_PLUGIN_RELEASES}/tag/"
    f"{GATEWAY_API_PLUGIN_VERSION} (GitHub lists each asset's sha256 digest there and in the "
    f"API's assets[].digest, after 'sha256:'), as -c experiment.{_KEY}=<64 lower-case hex digits>"
)


def sha256_malformed(value: str) -> str:
    return (
        f"{_KEY} {value!r} is not a SHA-256 as Argo Rollouts compares it: 64 lower-case hex digits"
    )


# Checked with every other deploy pin in one place (ExperimentConfig._deploy_pins).
PluginSha256 = str | None


def plugin_sha256(value: str | None) -> str:
    """The digest; a configuration built for the CDK app (``for_eks``) always has one."""
    if value is None:
        raise ValueError(DIGEST_MISSING)
    return value
