"""``python -m experiment check``: after ``cdk deploy``, is everything up, wired and watched?

    python -m experiment check --prometheus-url <the stack's PrometheusQueryUrl output>
    python -m experiment check --local --prometheus-url <the local run's Prometheus>

Grouped checks, each passed (✓), failed (✗, with what to change) or skipped (-, with why);
the exit code is 1 when any failed:

- Cluster and nodes: the API answers; the Neuron nodes are Ready and publish their devices
  (DRA ResourceSlices); the serving pods' ResourceClaims are allocated.
- Serving: the model-import Job is complete; both arms' pods are Ready and serve
  ``serving.target_model`` (through a port-forward: the NetworkPolicies admit only the
  gateway and the load test); the Rollout's canary (speculative) revision exists, each
  arm's Service selects its own revision and the canary's guardrail analysis is Running;
  the gateway answers one tiny completion per class on its route.
- Telemetry (with ``--prometheus-url``): the backend answers (the AMP workspace, SigV4 with
  your AWS credentials; the local Prometheus, plain), receives both arms' and the gateway's
  series, holds the guardrail rule group, fires none of its alerts, and the probe's last
  success is recent.
- Load test: the load-test Job's state.

Run it with the ``-c``/``--config`` the deploy used: every name it looks up derives from the
configuration (and the deploy pins of cdk.context.json). ``--local`` checks the stack
``python -m local_run`` starts (``make local``, with ``local.tiered`` and
``local.guardrails`` for the gateway and Prometheus) on the ``local.*`` ports while it runs,
and skips the Kubernetes checks.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from charts.gateway import OWNING_GATEWAY_NAME, gateway_name, route_name
from charts.rollout import AMP_HOST_MARK, rollout_name
from deploy_check import kube
from deploy_check.http import (
    DEFAULT_TIMEOUT_S,
    Endpoint,
    RouteCase,
    UrlEndpoint,
    model_result,
    model_title,
    route_cases,
    route_result,
)
from deploy_check.model import Group, Result, Status, exit_code, render, skip_all
from deploy_check.telemetry import (
    ALERTS_FIX,
    PrometheusApi,
    PrometheusError,
    Signer,
    TelemetryFixes,
    sigv4_signer,
    telemetry_results,
    telemetry_titles,
)
from experiment.config import Arm, ExperimentConfig
from experiment.loading import ConfigError, add_config_arguments, config_from_arguments
from guardrails.rules import SERVED_METRICS, jobs, rule_set
from guardrails.scrape import ENVOY_GATEWAY_METRICS_PORT, ENVOY_METRICS_PATH, VLLM_METRICS_PATH
from runtime.spec import Generation

if TYPE_CHECKING:
    from kubernetes.client import V1Pod

EXIT_BAD_INPUT = 2
# (query root) -> the signer of its requests, or None for plain HTTP.
SignerFactory = Callable[[str], Signer | None]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument(
        "--local",
        action="store_true",
        help="check the stack python -m local_run starts (ports from local.*) instead of the "
        "cluster; the Kubernetes checks are skipped",
    )
    parser.add_argument(
        "--prometheus-url",
        help="the Prometheus query root: the stack's PrometheusQueryUrl output "
        "(https://aps-workspaces.<region>.amazonaws.com/workspaces/<id>, signed with SigV4), "
        "or with --local the URL python -m local_run prints ('Prometheus evaluating the "
        "guardrail rules at ...'); without it the telemetry checks are skipped",
    )
    parser.add_argument("--kube-context", help="kubeconfig context (default: the current one)")
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help=f"seconds each request may take (default {DEFAULT_TIMEOUT_S:g})",
    )


def run(
    args: argparse.Namespace,
    *,
    reader: kube.KubeReader | None = None,
    signer: SignerFactory | None = None,
    out: TextIO | None = None,
) -> int:
    """Run every check and print the report on ``out`` (stdout). ``reader``: the cluster's
    objects (default: the kubeconfig's cluster); ``signer``: how Prometheus requests are
    signed (default: SigV4 for an AMP workspace, none otherwise)."""
    try:
        config = config_from_arguments(args, deploy=not args.local)
    except ConfigError as err:
        print(err, file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.local:
        results = local_results(config, args.prometheus_url, args.timeout_s)
    else:
        results = cluster_results(
            config, args, reader, signer or default_signer(config), args.timeout_s
        )
    print(render(results), end="", file=out or sys.stdout)
    return exit_code(results)


def default_signer(config: ExperimentConfig) -> SignerFactory:
    def factory(url: str) -> Signer | None:
        return sigv4_signer(config.region) if AMP_HOST_MARK in url else None

    return factory


# --- local ------------------------------------------------------------------------------

NO_KUBERNETES = "--local: the local stack runs no Kubernetes"
NO_ROLLOUT = (
    "--local: Argo Rollouts runs on the cluster; python -m local_run runs the same analysis "
    "against its Prometheus (LiveAnalysis) and reports it"
)


def local_url(config: ExperimentConfig, port: int) -> str:
    return f"http://{config.local.host}:{port}"


def local_arm_port(config: ExperimentConfig, arm: Arm) -> int:
    local = config.local
    return local.baseline_port if arm is Arm.BASELINE else local.speculative_port


def start_hint(config: ExperimentConfig) -> str:
    return (
        "start the local stack with the configuration checked here: python -m local_run "
        "-c local.tiered=true -c local.guardrails=true (plus the same -c/--config), and "
        "check while it runs"
    )


def local_results(
    config: ExperimentConfig, prometheus_url: str | None, timeout_s: float
) -> list[Result]:
    results = skip_all(Group.CLUSTER, cluster_titles(config), NO_KUBERNETES)
    results.append(
        Result.skipped(
            Group.SERVING,
            kube.import_title(config),
            "--local: the local run generates its models (local.models_dir)",
        )
    )
    results += skip_all(
        Group.SERVING, [kube.ready_title(config, arm) for arm in Arm], NO_KUBERNETES
    )
    for arm in Arm:
        port = local_arm_port(config, arm)
        endpoint = UrlEndpoint(local_url(config, port), timeout_s)
        fix = f"{start_hint(config)}; its {arm.value} server listens on local.{arm.value}_port"
        results.append(
            model_result(
                Group.SERVING, arm, [endpoint], config.serving.target_model, unreachable_fix=fix
            )
        )
    titles = [kube.canary_title(config), kube.SERVICES_TITLE, kube.ANALYSIS_TITLE]
    results += skip_all(Group.SERVING, titles, NO_ROLLOUT)
    gateway: Endpoint | str = (
        UrlEndpoint(local_url(config, config.local.gateway_port), timeout_s)
        if config.local.tiered
        else "local.tiered is false: the local run starts no gateway"
    )
    results += gateway_results(
        config,
        gateway,
        unreachable_fix=f"{start_hint(config)}; its gateway listens on local.gateway_port",
        route_fix="the {rule} rule sends it to the {arm} server: see its check above and the "
        "run's servers/gateway/envoy.log",
        skip=not config.local.tiered,
    )
    results += local_telemetry(config, prometheus_url, timeout_s)
    results.append(
        Result.skipped(
            Group.LOADTEST,
            "the load-test Job",
            "--local: the local load test is python -m local_run's own (its report is under "
            "local.runs_dir)",
        )
    )
    return results


def local_telemetry(
    config: ExperimentConfig, prometheus_url: str | None, timeout_s: float
) -> list[Result]:
    from local_run.guardrails import RULE_FILE, without_probe

    rules = rule_set(without_probe(config), Generation.LOCAL_CPU)
    titles = telemetry_titles(config, rules, probe=True)
    if not config.local.guardrails:
        return skip_all(
            Group.TELEMETRY, titles, "local.guardrails is false: the local run starts no Prometheus"
        )
    if not prometheus_url:
        return skip_all(
            Group.TELEMETRY,
            titles,
            "no --prometheus-url: python -m local_run prints it ('Prometheus evaluating the "
            "guardrail rules at <url>')",
        )
    api = PrometheusApi(UrlEndpoint(prometheus_url, timeout_s))

    def scrape(arm: Arm | None) -> str:
        if arm is None:
            return (
                f"the local Prometheus scrapes the gateway's Envoy admin {ENVOY_METRICS_PATH}: "
                "is the gateway up (its check above)?"
            )
        return (
            f"the local Prometheus scrapes {local_url(config, local_arm_port(config, arm))}"
            f"{VLLM_METRICS_PATH}: is that server up (its check above)?"
        )

    fixes = TelemetryFixes(
        reachable=f"{start_hint(config)}; pass the URL it prints",
        scrape=scrape,
        rules=f"the local run writes its rule file (guardrails/{RULE_FILE} in the run's "
        "directory) from its configuration: check with the configuration it was started with",
        probe="",
    )
    served = SERVED_METRICS[Generation.LOCAL_CPU]
    return telemetry_results(
        api,
        config,
        served,
        rules,
        fixes,
        probe_skipped="no probe runs locally (local_run/guardrails.py without_probe)",
    )


# --- cluster ----------------------------------------------------------------------------


def cluster_titles(config: ExperimentConfig) -> list[str]:
    return [
        kube.API_TITLE,
        kube.nodes_title(config),
        kube.devices_title(config),
        kube.CLAIMS_TITLE,
    ]


def serving_titles(config: ExperimentConfig) -> list[str]:
    titles = [kube.import_title(config)] if config.model_store.import_checkpoints else []
    titles += [kube.ready_title(config, arm) for arm in Arm]
    titles += [model_title(arm, config.serving.target_model) for arm in Arm]
    titles += [kube.canary_title(config), kube.SERVICES_TITLE, kube.ANALYSIS_TITLE]
    return titles + [case.title for case in route_cases(config)]


def refused(group: Group, title: str, err: kube.KubeError) -> Result:
    """A check the API server did not answer."""
    return Result.failed(
        group,
        title,
        str(err),
        "your identity needs read access to it (kubectl auth can-i get <resource>); the "
        "cluster admin's access entry (cluster.admin_principal_arns) has it",
    )


def guarded(group: Group, title: str, check: Callable[[], Result]) -> Result:
    """``check()``, or a failure saying what the API server refused."""
    try:
        return check()
    except kube.KubeError as err:
        return refused(group, title, err)


ArmPods = dict[Arm, list["V1Pod"]]


def cluster_results(
    config: ExperimentConfig,
    args: argparse.Namespace,
    reader: kube.KubeReader | None,
    signer: SignerFactory,
    timeout_s: float,
) -> list[Result]:
    """Every check of the deployed stack; when the API does not answer, the Kubernetes ones
    are skipped (telemetry does not need it)."""
    first: Result | None = None
    if reader is None:
        try:
            reader = kube.ClusterReader.from_kubeconfig(args.kube_context, timeout_s)
        except kube.KubeError as err:
            first = kube.api_failed(config, str(err))
    if reader is not None:
        first = kube.api_result(reader, config)
    assert first is not None
    telemetry = cluster_telemetry(config, args.prometheus_url, signer, timeout_s)
    if reader is None or first.status is Status.FAILED:
        why = "the cluster's API does not answer"
        return [
            first,
            *skip_all(Group.CLUSTER, cluster_titles(config)[1:], why),
            *skip_all(Group.SERVING, serving_titles(config), why),
            *telemetry,
            Result.skipped(Group.LOADTEST, kube.loadtest_title(config), why),
        ]
    try:
        pods: ArmPods | kube.KubeError = {arm: kube.arm_pods(reader, config, arm) for arm in Arm}
    except kube.KubeError as err:
        pods = err
    loadtest = guarded(
        Group.LOADTEST, kube.loadtest_title(config), lambda: kube.loadtest_result(reader, config)
    )
    return [
        first,
        *cluster_checks(reader, config, pods),
        *serving_checks(reader, config, pods),
        *telemetry,
        loadtest,
    ]


def cluster_checks(
    reader: kube.KubeReader, config: ExperimentConfig, pods: ArmPods | kube.KubeError
) -> list[Result]:
    titles = cluster_titles(config)[1:]
    try:
        nodes = kube.neuron_nodes(reader, config)
    except kube.KubeError as err:
        results = [refused(Group.CLUSTER, title, err) for title in titles[:2]]
    else:
        results = [
            kube.nodes_result(nodes, config),
            guarded(
                Group.CLUSTER,
                titles[1],
                lambda: kube.devices_result(nodes, reader.resource_slices(), config),
            ),
        ]
    if isinstance(pods, kube.KubeError):
        return [*results, refused(Group.CLUSTER, kube.CLAIMS_TITLE, pods)]
    every = [pod for found in pods.values() for pod in found]
    claims = guarded(
        Group.CLUSTER, kube.CLAIMS_TITLE, lambda: kube.claims_result(reader, every, config)
    )
    return [*results, claims]


def serving_checks(
    reader: kube.KubeReader, config: ExperimentConfig, pods: ArmPods | kube.KubeError
) -> list[Result]:
    results = []
    if config.model_store.import_checkpoints:
        title = kube.import_title(config)
        results.append(guarded(Group.SERVING, title, lambda: kube.import_result(reader, config)))
    results += arm_checks(reader, config, pods)
    results += rollout_checks(reader, config)
    try:
        gateway: Endpoint | str = kube.gateway_endpoint(reader, config)
    except kube.KubeError as err:
        gateway = str(err)
    eks = config.routing.eks
    results += gateway_results(
        config,
        gateway,
        unreachable_fix=f"kubectl -n {eks.namespace} get pods -l "
        f"{OWNING_GATEWAY_NAME}={gateway_name(config)} (the gateway's Envoy pods) and the "
        f"Envoy Gateway controller's logs in {eks.namespace}",
        route_fix="the {rule} rule sends it to the {arm} arm: see that arm's checks above; "
        f"kubectl -n {config.serving.namespace} describe httproute {route_name(config)} says "
        "whether Envoy Gateway accepted the route",
        skip=False,
    )
    return results


def arm_checks(
    reader: kube.KubeReader, config: ExperimentConfig, pods: ArmPods | kube.KubeError
) -> list[Result]:
    """Each arm's pods Ready, then each arm's Ready pods serving the model."""
    model = config.serving.target_model
    if isinstance(pods, kube.KubeError):
        titles = [kube.ready_title(config, arm) for arm in Arm]
        titles += [model_title(arm, model) for arm in Arm]
        return [refused(Group.SERVING, title, pods) for title in titles]
    results = [kube.ready_result(pods[arm], config, arm) for arm in Arm]
    fix = (
        f"its vLLM does not answer through the port-forward: kubectl -n "
        f"{config.serving.namespace} logs <pod> -c vllm; a port-forward needs the "
        "pods/portforward permission"
    )
    for arm in Arm:
        endpoints = kube.pod_endpoints(reader, pods[arm], config.serving.port)
        results.append(model_result(Group.SERVING, arm, endpoints, model, unreachable_fix=fix))
    return results


def rollout_checks(reader: kube.KubeReader, config: ExperimentConfig) -> list[Result]:
    titles = [kube.canary_title(config), kube.SERVICES_TITLE, kube.ANALYSIS_TITLE]
    try:
        rollout = reader.rollout(config.serving.namespace, rollout_name(config))
    except kube.KubeError as err:
        return [refused(Group.SERVING, title, err) for title in titles]
    return [
        kube.canary_result(rollout, config),
        guarded(Group.SERVING, titles[1], lambda: kube.services_result(reader, rollout, config)),
        guarded(Group.SERVING, titles[2], lambda: kube.analysis_result(reader, rollout, config)),
    ]


def gateway_results(
    config: ExperimentConfig,
    gateway: Endpoint | str,
    *,
    unreachable_fix: str,
    route_fix: str,
    skip: bool,
) -> list[Result]:
    """One completion per route case through ``gateway``; ``gateway`` a string: why there is
    none to ask (skipped when ``skip``, else failed)."""
    results = []
    for case in route_cases(config):
        if isinstance(gateway, str):
            results.append(_no_gateway(case, gateway, unreachable_fix, skip))
            continue
        results.append(
            route_result(
                Group.SERVING,
                config,
                case,
                gateway,
                unreachable_fix=unreachable_fix,
                route_fix=route_fix,
            )
        )
    return results


def _no_gateway(case: RouteCase, why: str, fix: str, skip: bool) -> Result:
    if skip:
        return Result.skipped(Group.SERVING, case.title, why)
    return Result.failed(Group.SERVING, case.title, why, fix)


def cluster_telemetry(
    config: ExperimentConfig, prometheus_url: str | None, signer: SignerFactory, timeout_s: float
) -> list[Result]:
    generation = config.serving.generation
    rules = rule_set(config, generation)
    titles = telemetry_titles(config, rules, probe=True)
    if not config.guardrails.live.enabled:
        return skip_all(
            Group.TELEMETRY,
            titles,
            "guardrails.live.enabled is false: nothing scrapes the arms (the analysis reads the "
            "load test's CloudWatch metrics)",
        )
    if not prometheus_url:
        return skip_all(
            Group.TELEMETRY,
            titles,
            "no --prometheus-url: pass the cluster stack's PrometheusQueryUrl output",
        )
    access = (
        f"the URL is the cluster stack's PrometheusQueryUrl output, in {config.region}; your "
        "AWS identity needs aps:QueryMetrics, aps:ListRules and aps:ListAlerts on the workspace"
    )
    try:
        api = PrometheusApi(UrlEndpoint(prometheus_url, timeout_s), signer(prometheus_url))
    except PrometheusError as err:
        first = Result.failed(Group.TELEMETRY, titles[0], str(err), access)
        return [first, *skip_all(Group.TELEMETRY, titles[1:], "no AWS credentials")]
    fixes = TelemetryFixes(
        reachable=access,
        scrape=lambda arm: cluster_scrape_fix(config, arm),
        rules=f"cdk deploy writes the rule groups namespace {rules.group} (stacks/guardrails.py) "
        f"from this configuration: aws amp describe-rule-groups-namespace --workspace-id <id> "
        f"--name {rules.group}; check with the configuration it was deployed with",
        alerts=f"{ALERTS_FIX}. An analysis alert aborts the speculative revision (the "
        "rollback); once the cause is fixed, kubectl argo rollouts retry restarts it",
        probe=f"the CronJob {config.project}-probe runs on guardrails.probe.schedule "
        f"'{config.guardrails.probe.schedule}' and pushes only complete runs: kubectl -n "
        f"{config.serving.namespace} get jobs, then the last probe Job's logs",
    )
    probe_skipped = None if config.guardrails.probe_runs else "guardrails.probe.enabled is false"
    return telemetry_results(
        api, config, SERVED_METRICS[generation], rules, fixes, probe_skipped=probe_skipped
    )


def cluster_scrape_fix(config: ExperimentConfig, arm: Arm | None) -> str:
    job = jobs(config)["vllm" if arm else "gateway"]
    if arm is None:
        return (
            f"the managed collector's job {job} scrapes the gateway's Envoy pods on "
            f"{ENVOY_GATEWAY_METRICS_PORT}{ENVOY_METRICS_PATH}: are they Ready (the gateway "
            "checks)? aws amp describe-scraper shows the collector's status"
        )
    return (
        f"the managed collector's job {job} scrapes the {arm.value} pods on "
        f"{config.serving.port}{VLLM_METRICS_PATH}: are they Ready (above)? The NetworkPolicy "
        f"{config.project}-vllm-metrics-from-collector admits the collector's subnets; aws amp "
        "describe-scraper shows the collector's status"
    )
