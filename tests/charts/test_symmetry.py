"""The most important test of the product: the two services differ only in decoding.

Both Deployments (and their Service, PDB, spec ConfigMap) come from one construct; the
checker must report nothing for them, and must report any other field changed on one
arm only (each mutation below is such a change).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from charts.app import ArmsDriftError, check_arms
from charts.naming import SPEC_FILE
from charts.symmetry import arm_asymmetries, command_asymmetries
from charts.vllm_service import COMMAND_ANNOTATION, arm_manifests
from experiment import build_config
from experiment.config import Arm

pytestmark = pytest.mark.infra

Manifest = dict[str, Any]


def _arms(config=None) -> tuple[list[Manifest], list[Manifest]]:
    config = config or build_config({})
    return arm_manifests(config, Arm.BASELINE), arm_manifests(config, Arm.SPECULATIVE)


def _kind(manifests: list[Manifest], kind: str) -> Manifest:
    return next(m for m in manifests if m["kind"] == kind)


def _pod(manifests: list[Manifest]) -> dict[str, Any]:
    return _kind(manifests, "Deployment")["spec"]["template"]["spec"]


def _vllm(manifests: list[Manifest]) -> dict[str, Any]:
    return _pod(manifests)["containers"][0]


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"experiment.serving.num_speculative_tokens": 5},
        {"experiment.serving.replicas": 2, "experiment.serving.max_num_seqs": 8},
        {"experiment.serving.profile": "new-deployment"},
    ],
)  # fmt: skip
def test_arms_differ_only_in_names_labels_and_decoding(overrides) -> None:
    baseline, speculative = _arms(build_config(overrides))
    assert arm_asymmetries(baseline, speculative) == []


def test_the_decoding_difference_is_really_there() -> None:
    baseline, speculative = _arms()
    base_cmd = _kind(baseline, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    spec_cmd = _kind(speculative, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert "--speculative-config" not in base_cmd[COMMAND_ANNOTATION]
    assert '"num_speculative_tokens":7' in spec_cmd[COMMAND_ANNOTATION]
    assert "enable_fused_speculation" in spec_cmd[COMMAND_ANNOTATION]
    spec = json.loads(_kind(speculative, "ConfigMap")["data"][SPEC_FILE])
    assert spec["draft_model"].endswith("Qwen/Qwen3-1.7B")
    assert spec["num_speculative_tokens"] == 7


def _set_image(m):
    _vllm(m)["image"] += "-other"


def _set_cpu(m):
    _vllm(m)["resources"]["limits"]["cpu"] = "91"


def _add_env(m):
    _vllm(m)["env"].append({"name": "VLLM_EXTRA", "value": "1"})


def _probe(m):
    _vllm(m)["startupProbe"]["failureThreshold"] += 1


def _shm(m):
    next(v for v in _pod(m)["volumes"] if v["name"] == "shm")["emptyDir"]["sizeLimit"] = "64Gi"


def _toleration(m):
    _pod(m)["tolerations"] = []


def _claim(m):
    _pod(m)["resourceClaims"][0]["resourceClaimTemplateName"] = "other-claim"


def _replicas(m):
    _kind(m, "Deployment")["spec"]["replicas"] = 2


def _init_container(m):
    _pod(m)["initContainers"][0]["command"].append("--extra")


def _service_port(m):
    _kind(m, "Service")["spec"]["ports"][0]["port"] = 9000


def _pdb(m):
    _kind(m, "PodDisruptionBudget")["spec"]["minAvailable"] = 0


def _extra_label(m):
    _kind(m, "Deployment")["spec"]["template"]["metadata"]["labels"]["canary"] = "yes"


def _grace(m):
    _pod(m)["terminationGracePeriodSeconds"] = 1


def _spec_field(m):
    cm = _kind(m, "ConfigMap")
    spec = json.loads(cm["data"][SPEC_FILE])
    spec["max_num_seqs"] = 8
    cm["data"][SPEC_FILE] = json.dumps(spec)


def _command_flag(m):
    annotations = _kind(m, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    annotations[COMMAND_ANNOTATION] = annotations[COMMAND_ANNOTATION].replace(
        "--max-num-seqs 4", "--max-num-seqs 8"
    )


def _override_key(m):
    annotations = _kind(m, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    annotations[COMMAND_ANNOTATION] = annotations[COMMAND_ANNOTATION].replace(
        '"save_sharded_checkpoint":true', '"save_sharded_checkpoint":false'
    )


def _volume_order(m):
    _pod(m)["volumes"].reverse()


MUTATIONS: dict[str, Callable[[list[Manifest]], None]] = {
    "image": _set_image,
    "cpu": _set_cpu,
    "env": _add_env,
    "startup probe": _probe,
    "shm size": _shm,
    "tolerations": _toleration,
    "resource claim": _claim,
    "replicas": _replicas,
    "init container": _init_container,
    "service port": _service_port,
    "disruption budget": _pdb,
    "extra pod label": _extra_label,
    "termination grace": _grace,
    "spec field other than decoding": _spec_field,
    "shared vLLM flag": _command_flag,
    "shared Neuron override": _override_key,
    "volume order": _volume_order,
}


@pytest.mark.parametrize("arm", list(Arm))
@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_checker_reports_any_other_field_changed_on_one_arm(name: str, arm: Arm) -> None:
    baseline, speculative = _arms()
    target = baseline if arm == Arm.BASELINE else speculative
    MUTATIONS[name](target)
    assert arm_asymmetries(baseline, speculative) != [], f"{name} on {arm} went unnoticed"


def test_mutating_both_arms_alike_is_fine() -> None:
    baseline, speculative = _arms()
    for manifests in (baseline, speculative):
        _set_image(manifests)
        _set_cpu(manifests)
    assert arm_asymmetries(baseline, speculative) == []


def test_losing_the_draft_is_reported() -> None:
    baseline, _ = _arms()
    assert "no --speculative-config" in " ".join(command_asymmetries("--port 1", "--port 1"))
    assert arm_asymmetries(baseline, copy.deepcopy(baseline))  # two baselines: no draft


def test_synthesis_refuses_drifted_arms(monkeypatch: pytest.MonkeyPatch) -> None:
    import charts.app as app_module

    real = app_module.arm_manifests

    def drifted(config, arm):
        manifests = real(config, arm)
        if arm == Arm.SPECULATIVE:
            _set_cpu(manifests)
        return manifests

    monkeypatch.setattr(app_module, "arm_manifests", drifted)
    with pytest.raises(ArmsDriftError, match=r"limits\.cpu"):
        check_arms(build_config({}))


# N arms: the tuning candidates (tuning.deploy) come from the same construct.
SWEEP = {"experiment.tuning.deploy": "true", "experiment.cluster.neuron_nodes.max_size": "5"}


def _fleet(overrides=None) -> tuple[list[Manifest], dict[str, list[Manifest]]]:
    from charts.app import candidate_configs

    config = build_config({**SWEEP, **(overrides or {})})
    arms = {config.serving.speculative_service: arm_manifests(config, Arm.SPECULATIVE)}
    for name, candidate in candidate_configs(config).items():
        arms[name] = arm_manifests(candidate, Arm.SPECULATIVE)
    return arm_manifests(config, Arm.BASELINE), arms


@pytest.mark.parametrize(
    ("overrides", "arms"),
    [
        ({"experiment.tuning.deploy": "false"}, 1),  # 2 arms: baseline + SD
        ({}, 9),  # 2 drafts x 4 k + the comparison's SD arm
        ({"experiment.tuning.holdout_k": "[4, 7]"}, 8),  # 1.7B k=7 is the SD arm already
    ],
)
def test_every_arm_differs_from_the_baseline_only_in_decoding(overrides, arms) -> None:
    from charts.symmetry import fleet_asymmetries

    baseline, fleet = _fleet(overrides)
    assert len(fleet) == arms
    assert fleet_asymmetries(baseline, fleet) == []
    check_arms(build_config({**SWEEP, **overrides}))
    specs = [json.loads(_kind(m, "ConfigMap")["data"][SPEC_FILE]) for m in fleet.values()]
    # Each arm compiles into its own path, named with its compile fingerprint.
    paths = [s["compiled_artifacts_path"] for s in specs]
    assert len(set(paths)) == len(paths)
    assert len({(s["draft_model"], s["num_speculative_tokens"]) for s in specs}) == arms


def test_candidate_names_carry_draft_k_and_fingerprint() -> None:
    from charts.app import candidate_service_name
    from runtime.artifacts import compile_fingerprint

    config = build_config(SWEEP)
    name = candidate_service_name(config, "Qwen/Qwen3-0.6B", 4)
    assert name.startswith("qwen-sd-vllm-qwen3-0-6b-k4-")
    spec = config.with_speculative("Qwen/Qwen3-0.6B", 4, name).serving_spec(Arm.SPECULATIVE)
    assert name.endswith(compile_fingerprint(spec)[:8])
    assert spec.compiled_artifacts_path.endswith(f"/compiled/{name}")
    # A setting that changes the compiled graph changes the path: no stale artifacts reused.
    longer = build_config({**SWEEP, "experiment.serving.max_model_len": "2048"})
    assert candidate_service_name(longer, "Qwen/Qwen3-0.6B", 4) != name


@pytest.mark.parametrize("mutation", ["cpu", "env", "spec field other than decoding"])
def test_a_drifted_candidate_is_named(mutation: str) -> None:
    from charts.symmetry import fleet_asymmetries

    baseline, fleet = _fleet()
    victim = sorted(fleet)[3]
    MUTATIONS[mutation](fleet[victim])
    problems = fleet_asymmetries(baseline, fleet)
    assert problems
    assert all(p.startswith(f"{victim}: ") for p in problems)


def test_two_arms_with_the_same_draft_and_k_are_refused() -> None:
    from charts.symmetry import fleet_asymmetries

    baseline, fleet = _fleet()
    first, second = sorted(fleet)[:2]
    fleet[second] = copy.deepcopy(fleet[first])
    problems = fleet_asymmetries(baseline, fleet)
    assert any("share the same service_name" in p for p in problems)
    assert any("share the same draft" in p for p in problems)


def test_too_many_arms_for_the_node_group_is_rejected_at_synth() -> None:
    from experiment.loading import ConfigError

    config = build_config({"experiment.tuning.deploy": "true"})
    with pytest.raises(ConfigError, match="raise max_size to 5"):
        check_arms(config)


def test_the_serving_chart_deploys_every_candidate() -> None:
    import cdk8s

    from charts.app import ServingChart
    from charts.inputs import ClusterInputs

    config = build_config(SWEEP)
    chart = ServingChart(cdk8s.App(), "serving", config, ClusterInputs("bucket", "image:tag"))
    assert len(chart.candidates) == 8
    deployments = [o for o in chart.to_json() if o["kind"] == "Deployment"]
    assert len(deployments) == 8  # the two compared arms are the Rollout's revisions


# The plugin path (vllm-neuron 1.x): the one difference it imposes is named, not tolerated.
PLUGIN = {"experiment.serving.profile": "new-deployment"}


def _command(manifests: list[Manifest]) -> str:
    annotations = _kind(manifests, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    return str(annotations[COMMAND_ANNOTATION])


def _set_command(manifests: list[Manifest], command: str) -> None:
    annotations = _kind(manifests, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    annotations[COMMAND_ANNOTATION] = command


def test_plugin_async_scheduling_is_the_named_allowed_difference() -> None:
    from charts.symmetry import allowed_differences
    from runtime.spec import Generation

    baseline, speculative = _arms(build_config(PLUGIN))
    assert "--no-async-scheduling" in _command(speculative)
    assert "--no-async-scheduling" not in _command(baseline)
    assert arm_asymmetries(baseline, speculative) == []
    # Named with its source, for the plugin only.
    reasons = allowed_differences(Generation.NEURON_PLUGIN)
    assert set(reasons) == {"--no-async-scheduling", PER_REQUEST}
    assert "features-guide.md" in reasons["--no-async-scheduling"]
    assert allowed_differences(Generation.NEURON_FORK) == {}


def test_async_scheduling_off_is_not_allowed_on_the_fork_or_on_the_baseline() -> None:
    baseline, speculative = _arms()
    _set_command(speculative, _command(speculative) + " --no-async-scheduling")
    assert any("--no-async-scheduling only on the speculative arm" in p
               for p in arm_asymmetries(baseline, speculative))  # fmt: skip
    plugin_base, plugin_spec = _arms(build_config(PLUGIN))
    _set_command(plugin_base, _command(plugin_base) + " --no-async-scheduling")
    _set_command(plugin_spec, _command(plugin_spec).replace(" --no-async-scheduling", ""))
    assert arm_asymmetries(plugin_base, plugin_spec) != []


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("--no-enable-prefix-caching", "--enable-prefix-caching"),
        ('"all_greedy":true', '"all_greedy":false'),
        ("--no-enable-prefix-caching", "--no-enable-prefix-caching --no-enable-chunked-prefill"),
    ],
)
@pytest.mark.parametrize("arm", list(Arm))
def test_plugin_prefix_caching_and_neuron_config_must_match(old: str, new: str, arm: Arm) -> None:
    baseline, speculative = _arms(build_config(PLUGIN))
    target = baseline if arm == Arm.BASELINE else speculative
    assert old in _command(target)
    _set_command(target, _command(target).replace(old, new))
    assert arm_asymmetries(baseline, speculative) != [], f"{new} on {arm} went unnoticed"


# The guardrail Rollout's two revisions: stable = baseline, canary = speculative.


def _revisions(config=None) -> tuple[list[Manifest], list[Manifest]]:
    from charts.rollout import revision_manifests

    config = config or build_config({})
    return revision_manifests(config, Arm.BASELINE), revision_manifests(config, Arm.SPECULATIVE)


def _revision_pod(manifests: list[Manifest]) -> dict[str, Any]:
    return _kind(manifests, "Rollout")["spec"]["template"]["spec"]


@pytest.mark.parametrize(
    "overrides",
    [{}, {"experiment.serving.profile": "new-deployment"}, {"experiment.serving.replicas": 2}],
)
def test_the_rollouts_revisions_differ_only_in_decoding(overrides) -> None:
    baseline, speculative = _revisions(build_config(overrides))
    assert arm_asymmetries(baseline, speculative) == []
    command = _kind(speculative, "Rollout")["spec"]["template"]["metadata"]["annotations"]
    assert "--speculative-config" in command[COMMAND_ANNOTATION]


REVISION_MUTATIONS: dict[str, Callable[[list[Manifest]], None]] = {
    "image": lambda m: _revision_pod(m)["containers"][0].update(image="other:tag"),
    "cpu": lambda m: _revision_pod(m)["containers"][0]["resources"]["limits"].update(cpu="91"),
    "shared vLLM flag": lambda m: _kind(m, "Rollout")["spec"]["template"]["metadata"][
        "annotations"
    ].update({COMMAND_ANNOTATION: "--port 1 --speculative-config {}"}),
    "extra pod label": lambda m: _kind(m, "Rollout")["spec"]["template"]["metadata"][
        "labels"
    ].update(canary="yes"),
    "service selector": lambda m: _kind(m, "Service")["spec"]["selector"].update(extra="x"),
}


@pytest.mark.parametrize("arm", list(Arm))
@pytest.mark.parametrize("name", sorted(REVISION_MUTATIONS))
def test_checker_reports_a_revision_changed_beyond_decoding(name: str, arm: Arm) -> None:
    baseline, speculative = _revisions()
    REVISION_MUTATIONS[name](baseline if arm == Arm.BASELINE else speculative)
    assert arm_asymmetries(baseline, speculative) != [], f"{name} on {arm} went unnoticed"


def test_synthesis_refuses_drifted_rollout_revisions(monkeypatch: pytest.MonkeyPatch) -> None:
    import charts.app as app_module

    real = app_module.revision_manifests

    def drifted(config, arm):
        manifests = real(config, arm)
        if arm == Arm.SPECULATIVE:
            REVISION_MUTATIONS["cpu"](manifests)
        return manifests

    monkeypatch.setattr(app_module, "revision_manifests", drifted)
    with pytest.raises(ArmsDriftError, match=r"Rollout's two revisions.*limits\.cpu"):
        check_arms(build_config({}))


# The guardrails' scrape: both arms scraped alike, nothing else scraped as an arm.


def _scrape(config):
    from charts.app import check_scrape
    from charts.inputs import ClusterInputs
    from charts.rollout import managed_scrape_config

    (job,) = (
        j for j in managed_scrape_config(config)["scrape_configs"] if j["job_name"].endswith("vllm")
    )
    return job, lambda: check_scrape(config, ClusterInputs("bucket", "image:tag"))


def _arm_pods(config) -> dict[str, Manifest]:
    from charts.rollout import revision_template

    return {
        arm.value: {"metadata": {**(t := revision_template(config, arm))["metadata"],
                                 "name": f"pod-{arm.value}"}, "spec": t["spec"]}
        for arm in Arm
    }  # fmt: skip


@pytest.mark.parametrize(
    "overrides",
    [{}, {"experiment.serving.profile": "new-deployment"}, {"experiment.serving.replicas": "2"},
     {"experiment.loadtest.workers": "2"}, SWEEP],
)  # fmt: skip
def test_both_arms_are_scraped_alike_and_nothing_else_as_an_arm(overrides) -> None:
    from charts.symmetry import scrape_asymmetries

    config = build_config(overrides)
    job, check = _scrape(config)
    arms = _arm_pods(config)
    assert scrape_asymmetries(job, arms, {}, namespace=config.serving.namespace) == []
    check()  # every other pod of the rendering (load test, candidates) included


def _one_arm_only(job):
    for rule in job["relabel_configs"]:
        if rule.get("regex") == "baseline|speculative":
            rule["regex"] = "speculative"


def _arm_from_instance(job):
    for rule in job["relabel_configs"]:
        if rule.get("target_label") == "arm":
            rule["source_labels"] = ["__meta_kubernetes_pod_label_app_kubernetes_io_instance"]


def _label_for_one_arm(job):
    job["relabel_configs"].append(
        {"source_labels": ["__meta_kubernetes_pod_label_specdecode_aws_arm"],
         "regex": "speculative", "target_label": "tier", "replacement": "fast"}
    )  # fmt: skip


def _arm_label_only(job):
    # The scrape before arm_pods: the arm label alone, which load-test pods carry too.
    job["relabel_configs"] = [
        r for r in job["relabel_configs"] if "rollout" not in r["source_labels"][0]
    ]


SCRAPE_MUTATIONS = {
    "one arm only": (_one_arm_only, r"arm baseline: 0 targets"),
    "arm label from another pod label": (_arm_from_instance, r"scraped with arm="),
    "a label on one arm only": (_label_for_one_arm, r"different label tier"),
}


@pytest.mark.parametrize("name", sorted(SCRAPE_MUTATIONS))
def test_a_scrape_that_treats_the_arms_unalike_is_caught(name: str) -> None:
    from charts.symmetry import scrape_asymmetries

    config = build_config({})
    job, _ = _scrape(config)
    mutate, message = SCRAPE_MUTATIONS[name]
    mutate(job)
    problems = scrape_asymmetries(job, _arm_pods(config), {}, namespace=config.serving.namespace)
    assert problems and re.search(message, "; ".join(problems)), problems


def test_a_scrape_by_the_arm_label_alone_takes_candidates_for_the_speculative_arm(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import charts.app as app_module

    real = app_module.managed_scrape_config

    def arm_label_only(config):
        scrape = copy.deepcopy(real(config))
        _arm_label_only(scrape["scrape_configs"][0])
        return scrape

    monkeypatch.setattr(app_module, "managed_scrape_config", arm_label_only)
    _, check = _scrape(build_config(SWEEP))
    with pytest.raises(ArmsDriftError, match=r"Deployment qwen-sd-vllm-.* is scraped .* as an arm"):
        check()


def test_synthesis_refuses_a_scrape_of_one_arm(monkeypatch: pytest.MonkeyPatch) -> None:
    import cdk8s

    import charts.app as app_module
    from charts.inputs import ClusterInputs

    real = app_module.managed_scrape_config

    def one_arm(config):
        scrape = copy.deepcopy(real(config))
        _one_arm_only(scrape["scrape_configs"][0])
        return scrape

    monkeypatch.setattr(app_module, "managed_scrape_config", one_arm)
    inputs = ClusterInputs("b", "i", "https://aps-workspaces.us-east-2.amazonaws.com/workspaces/w/")
    with pytest.raises(ArmsDriftError, match=r"scrape treats the arms unalike"):
        app_module.build_charts(cdk8s.App(), build_config({}), inputs)


def test_a_speculation_schedule_is_a_decoding_difference() -> None:
    # serving.speculation_schedule reaches the speculative arm only (its spec and its
    # --speculative-config); the trn2 engines refuse it at synth, so it is put in by hand.
    baseline, speculative = _arms()
    configmap = _kind(speculative, "ConfigMap")
    spec = json.loads(configmap["data"][SPEC_FILE])
    assert "speculation_schedule" in spec  # a ServingSpec field: the name the check knows
    spec["speculation_schedule"] = [[1, 2, 7], [3, 4, 0]]
    configmap["data"][SPEC_FILE] = json.dumps(spec)
    annotations = _kind(speculative, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    annotations[COMMAND_ANNOTATION] = annotations[COMMAND_ANNOTATION].replace(
        '"num_speculative_tokens":7',
        '"num_speculative_tokens":7,"num_speculative_tokens_per_batch_size":[[1,2,7],[3,4,0]]',
    )
    assert "num_speculative_tokens_per_batch_size" in annotations[COMMAND_ANNOTATION]
    assert arm_asymmetries(baseline, speculative) == []


# Per-request acceptance (--per-request-spec-decode-metrics): an allowed speculative-only
# flag wherever the engine takes it (runtime/render.py), and nothing else becomes allowed.
PER_REQUEST = "--per-request-spec-decode-metrics"
# Mutations that exist on the plugin's manifests too (the fork's Neuron override does not).
PLUGIN_MUTATIONS = sorted(set(MUTATIONS) - {"shared Neuron override"})


def test_per_request_metrics_is_named_where_rendered_and_refused_on_the_fork() -> None:
    from charts.symmetry import allowed_differences
    from runtime.spec import Generation

    plugin_base, plugin_spec = _arms(build_config(PLUGIN))
    assert f"{PER_REQUEST} summary" in _command(plugin_spec)
    assert PER_REQUEST not in _command(plugin_base)
    assert arm_asymmetries(plugin_base, plugin_spec) == []
    for generation in (Generation.NEURON_PLUGIN, Generation.LOCAL_CPU):
        assert "vllm/config/vllm.py" in allowed_differences(generation)[PER_REQUEST]
    # The fork renders it on neither arm and may not: its engine refuses the flag.
    fork_base, fork_spec = _arms()
    assert PER_REQUEST not in _command(fork_spec)
    _set_command(fork_spec, _command(fork_spec) + f" {PER_REQUEST} summary")
    assert any(f"{PER_REQUEST} only on the speculative arm" in p
               for p in arm_asymmetries(fork_base, fork_spec))  # fmt: skip


def test_per_request_metrics_on_the_baseline_is_reported() -> None:
    baseline, speculative = _arms(build_config(PLUGIN))
    _set_command(baseline, _command(baseline) + f" {PER_REQUEST} summary")
    _set_command(speculative, _command(speculative).replace(f" {PER_REQUEST} summary", ""))
    assert any(f"{PER_REQUEST} only on the baseline" in p
               for p in arm_asymmetries(baseline, speculative))  # fmt: skip


@pytest.mark.parametrize("arm", list(Arm))
@pytest.mark.parametrize("name", PLUGIN_MUTATIONS)
def test_with_per_request_metrics_any_other_difference_still_fails(name: str, arm: Arm) -> None:
    baseline, speculative = _arms(build_config(PLUGIN))
    assert PER_REQUEST in _command(speculative)
    MUTATIONS[name](baseline if arm == Arm.BASELINE else speculative)
    assert arm_asymmetries(baseline, speculative) != [], f"{name} on {arm} went unnoticed"


def test_another_speculative_only_flag_is_not_allowed_beside_it() -> None:
    baseline, speculative = _arms(build_config(PLUGIN))
    _set_command(speculative, _command(speculative) + " --enable-log-outputs")
    assert arm_asymmetries(baseline, speculative) == [
        "Deployment command: flag --enable-log-outputs only on the speculative arm"
    ]


@pytest.mark.parametrize(
    "name", ["cpu", "env", "shared vLLM flag", "spec field other than decoding"]
)
def test_n_plugin_arms_with_per_request_metrics_still_catch_a_drifted_one(name: str) -> None:
    from charts.symmetry import fleet_asymmetries

    baseline, fleet = _fleet(PLUGIN)
    assert len(fleet) > 2
    assert all(PER_REQUEST in _command(manifests) for manifests in fleet.values())
    assert fleet_asymmetries(baseline, fleet) == []
    victim = sorted(fleet)[1]
    MUTATIONS[name](fleet[victim])
    problems = fleet_asymmetries(baseline, fleet)
    assert problems
    assert all(p.startswith(f"{victim}: ") for p in problems)
