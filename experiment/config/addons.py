"""The two EKS add-ons the stacks pin, and what a pinned version must be: of the form EKS lists
(``vX.Y.Z-eksbuild.N``), present for a deploy, and recent enough to read the credentials the
stacks give it. Checked with every other deploy pin (experiment/config/deploy_pins.py)."""

from __future__ import annotations

import re

# An EKS add-on version as `aws eks describe-addon-versions` lists it (addonVersion, e.g.
# 'v2.1.0-eksbuild.1'). Checked with every other deploy pin in one place
# (ExperimentConfig._deploy_pins), so one synth reports all of them at once.
ADDON_VERSION = re.compile(r"v\d+\.\d+\.\d+-eksbuild\.\d+")
# The two pinned add-ons and the setting of each (`python -m experiment pins` resolves both).
PINNED_ADDONS: dict[str, str] = {
    "aws-mountpoint-s3-csi-driver": "s3_csi_addon_version",
    "amazon-cloudwatch-observability": "cloudwatch_addon_version",
}


# The oldest release of each pinned add-on whose credentials come from EKS Pod Identity, as
# the stacks give them (docs/guardrails.md, "Credentials of in-cluster AWS clients"):
# Mountpoint for S3 CSI driver v2.0.0 (awslabs/mountpoint-s3-csi-driver README: "v2
# introduces ... EKS Pod Identity support"; v1.x reads IRSA only; the add-on's version is the
# driver's) and the CloudWatch observability add-on v3.1.0 (CloudWatch user guide, "Quick start
# with the Amazon CloudWatch Observability EKS add-on": "If you use version 3.1.0 or later of
# the add-on, you can use EKS Pod Identity").
POD_IDENTITY_MINIMUM: dict[str, tuple[int, int, int]] = {
    "aws-mountpoint-s3-csi-driver": (2, 0, 0),
    "amazon-cloudwatch-observability": (3, 1, 0),
}


def addon_release(version: str) -> tuple[int, int, int]:
    """(major, minor, patch) of a well-formed add-on version 'vX.Y.Z-eksbuild.N'."""
    major, minor, patch = version[1:].split("-", 1)[0].split(".")
    return int(major), int(minor), int(patch)


def addon_version_too_old(addon: str, key: str, value: str) -> str:
    least = "v" + ".".join(map(str, POD_IDENTITY_MINIMUM[addon]))
    return (
        f"{key} {value!r} is older than {least}, the first {addon} release that reads EKS "
        f"Pod Identity credentials, which the stacks give it: its pods would get none; pin "
        f"{least} or later (`make pins` records the default for the cluster's version)"
    )


def addon_version_malformed(key: str, value: str) -> str:
    return (
        f"{key} {value!r} is not an EKS add-on version of the form vX.Y.Z-eksbuild.N, such as "
        "'v2.1.0-eksbuild.1' (aws eks describe-addon-versions, addonVersion)"
    )


def addon_version_missing(addon: str, key: str, kubernetes_version: str) -> str:
    return (
        f"{key} is required: the {addon} EKS add-on is pinned so two deploys install the same "
        f"build. `make pins` records the default version for Kubernetes {kubernetes_version}; "
        f"by hand: `aws eks describe-addon-versions --addon-name {addon} --kubernetes-version "
        f'{kubernetes_version} --query "addons[].addonVersions[?compatibilities[?'
        f'defaultVersion]].addonVersion"` and -c experiment.{key}=<version>'
    )
