"""Every valid value, given any documented way (``-c``, a YAML file, a JSON file, cdk.json
context), reaches the config unchanged: the YAML trap of issue 15 item 9 (``1.35`` read as a
float for a string field) is fixed once, in the loader and the model, for every field."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from experiment import ConfigError, ExperimentConfig, build_config
from experiment.loading import context_from_pairs, load_config_text

DEFAULTS = build_config({}).model_dump(mode="json")


def _leaves(data: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(data, dict) and data:
        for key, value in data.items():
            yield from _leaves(value, f"{path}.{key}" if path else key)
    else:
        yield path, data


LEAVES = dict(_leaves(DEFAULTS))
STRING_LEAVES = sorted(path for path, value in LEAVES.items() if isinstance(value, str))


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def test_every_default_given_back_as_an_override_is_accepted_unchanged() -> None:
    # One -c per leaf, all at once: the config must come out exactly the default.
    pairs = [f"{path}={_as_text(value)}" for path, value in LEAVES.items()]
    assert len(pairs) > 100
    assert build_config(context_from_pairs(pairs)).model_dump(mode="json") == DEFAULTS


@pytest.mark.parametrize("path", STRING_LEAVES)
def test_no_string_field_rejects_a_number_looking_value_for_its_type(path: str) -> None:
    # A field may reject "1.40" on its own rules (a region, a bucket name), never because the
    # override was read as a number.
    try:
        config = build_config(context_from_pairs([f"{path}=1.40"]))
    except ConfigError as err:
        assert "valid string" not in str(err), str(err)
    else:
        value: Any = config.model_dump(mode="json")
        for part in path.split("."):
            value = value[part]
        assert value == "1.40"


def _kubernetes_version(build: Callable[[], ExperimentConfig]) -> str:
    """The version a config got, or the text the support calendar refused (1.40 has no row)."""
    try:
        return build().cluster.kubernetes_version
    except ConfigError as err:
        match = re.search(r"kubernetes_version '([^']+)' is not in the support calendar", str(err))
        assert match, str(err)
        return match.group(1)


@pytest.mark.parametrize("text", ["1.35", "1.40"])
def test_kubernetes_version_as_override_yaml_json_and_cdk_context(
    text: str, tmp_path: Path
) -> None:
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text(f"cluster:\n  kubernetes_version: {text}\n")
    json_file = tmp_path / "c.json"
    json_file.write_text(f'{{"cluster": {{"kubernetes_version": {text}}}}}')
    ways: list[Callable[[], ExperimentConfig]] = [
        lambda: build_config({"experiment.cluster.kubernetes_version": text}),
        lambda: build_config({"cluster.kubernetes_version": text}),
        lambda: build_config({}, config_file=yaml_file),
        lambda: build_config({}, config_file=json_file),
        lambda: build_config({"experiment": f'{{"cluster": {{"kubernetes_version": {text}}}}}'}),
    ]
    assert {_kubernetes_version(way) for way in ways} == {text}


def test_cdk_json_numbers_already_parsed_by_cdk_become_strings() -> None:
    # `cdk synth` hands cdk.json's context over already parsed: 1.35 is a float by then.
    config = build_config({"experiment": {"cluster": {"kubernetes_version": 1.35}}})
    assert config.cluster.kubernetes_version == "1.35"


def test_account_keeps_its_leading_zero_even_when_it_looks_octal() -> None:
    # YAML 1.1 reads 012345670123 as an octal number (1402433619): a different account.
    for way in ("experiment.account", "account"):
        assert build_config({way: "012345670123"}).account == "012345670123"
    assert build_config({"experiment": {"account": 12345670123}}).account == "012345670123"


def test_yes_no_on_off_stay_words_for_strings_and_are_booleans_for_booleans() -> None:
    config = build_config(
        context_from_pairs(["serving.namespace=no", "cluster.neuron_nodes.efa=yes"])
    )
    assert config.serving.namespace == "no"
    assert config.cluster.neuron_nodes.efa is True
    assert build_config({"cluster.neuron_nodes.efa": "off"}).cluster.neuron_nodes.efa is False


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3e-3", 0.003),
        ("0.5", 0.5),
        ("1_000", "1_000"),  # not a YAML 1.2 number: a string (pydantic reads it for an int)
        ("0o17", 15),
        ("0x1f", 31),
        ("007", 7),
        ("null", None),
        ("~", None),
        ("true", True),
        ("[a, 1]", ["a", 1]),
        ("1:30", "1:30"),  # YAML 1.1 would read 90 (sexagesimal)
    ],
)
def test_override_values_follow_yaml_1_2_core_scalars(text: str, expected: Any) -> None:
    assert load_config_text(text) == expected


def test_number_fields_still_take_numbers_from_text() -> None:
    config = build_config(
        context_from_pairs(
            [
                "local.generator.learning_rate=3e-3",
                "serving.logical_neuron_cores=2",
                "serving.compiled_max_model_len=null",
                "loadtest.request_rate=2.5",
            ]
        )
    )
    assert config.local.generator.learning_rate == pytest.approx(0.003)
    assert config.serving.logical_neuron_cores == 2
    assert config.serving.compiled_max_model_len is None
    assert config.loadtest.request_rate == 2.5


# As a careless user writes it: each of these was rejected or misread before.
def test_a_list_as_comma_separated_text_or_a_single_value() -> None:
    config = build_config(
        context_from_pairs(
            [
                "network.availability_zones=us-east-2a, us-east-2b",
                "cluster.admin_principal_arns=arn:aws:iam::123456789012:role/Admin",
                "local.server_args=--enforce-eager",
            ]
        )
    )
    assert config.network.availability_zones == ["us-east-2a", "us-east-2b"]
    assert config.cluster.admin_principal_arns == ["arn:aws:iam::123456789012:role/Admin"]
    assert config.local.server_args == ["--enforce-eager"]


def test_one_entry_of_a_mapping_keeps_the_other_entries() -> None:
    config = build_config(
        context_from_pairs(
            [
                "loadtest.variant_labels.baseline=Base-1",
                "pricing.neuron.on-demand.usd_per_hour=30",
                "pricing.neuron.on-demand.source=our quote",
                "pricing.neuron.on-demand.as_of=2026-11-01",
            ]
        )
    )
    labels = {str(arm): label for arm, label in config.loadtest.variant_labels.items()}
    assert labels == {"baseline": "Base-1", "speculative": "SD"}
    prices = {str(kind): entry for kind, entry in config.pricing.neuron.items()}
    defaults = {str(kind): entry for kind, entry in build_config({}).pricing.neuron.items()}
    assert prices["on-demand"].usd_per_hour == 30
    assert set(prices) == set(defaults)  # the other capacity types kept
    assert prices["capacity-block"] == defaults["capacity-block"]


def test_spaces_around_key_and_value() -> None:
    config = build_config(context_from_pairs(["serving.num_speculative_tokens = 5"]))
    assert config.serving.num_speculative_tokens == 5


def test_a_file_wrapped_in_experiment_as_in_cdk_json(tmp_path: Path) -> None:
    wrapped = tmp_path / "copied-from-cdk-json.yaml"
    wrapped.write_text("experiment:\n  serving:\n    num_speculative_tokens: 5\n")
    assert build_config({}, config_file=wrapped).serving.num_speculative_tokens == 5


def test_a_relative_config_file_is_found_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "mine.yaml").write_text("serving:\n  num_speculative_tokens: 4\n")
    monkeypatch.chdir(tmp_path)
    assert build_config({}, config_file="mine.yaml").serving.num_speculative_tokens == 4
