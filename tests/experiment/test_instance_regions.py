"""The committed region table agrees with the installed cfn-lint's instance-type data."""

from __future__ import annotations

import importlib.resources
import json

import pytest

from experiment import ConfigError, build_config
from experiment.config import NEURON_INSTANCE_TYPES
from experiment.instance_regions import CFN_LINT_DATA_FILE, NEURON_INSTANCE_REGIONS


def _cfn_lint_regions() -> dict[str, tuple[str, ...]]:
    data = json.loads((importlib.resources.files("cfnlint") / CFN_LINT_DATA_FILE).read_text())
    return {
        instance_type: tuple(
            sorted(
                region
                for region, entry in data.items()
                if region != "all"
                and isinstance(entry, dict)
                and instance_type in entry.get("enum", [])
            )
        )
        for instance_type in NEURON_INSTANCE_TYPES
    }


@pytest.mark.infra
def test_snapshot_matches_cfn_lint() -> None:
    expected = _cfn_lint_regions()
    assert expected == NEURON_INSTANCE_REGIONS, (
        f"cfn-lint's data changed: paste this into experiment/instance_regions.py: {expected!r}"
    )


def test_a_region_without_the_neuron_type_is_refused_with_where_it_is_offered() -> None:
    with pytest.raises(ConfigError, match=r"does not offer trn2\.48xlarge.*us-east-2"):
        build_config(
            {
                "region": "eu-west-1",
                "network.availability_zones": '["eu-west-1a", "eu-west-1b"]',
            }
        )


def test_a_region_that_offers_it_is_accepted() -> None:
    config = build_config(
        {"region": "ap-south-2", "network.availability_zones": '["ap-south-2a", "ap-south-2b"]'}
    )
    assert config.region == "ap-south-2"


def test_a_type_without_data_is_not_checked() -> None:
    config = build_config(
        {
            "region": "eu-west-1",
            "network.availability_zones": '["eu-west-1a", "eu-west-1b"]',
            "cluster.neuron_nodes.instance_type": "trn2u.48xlarge",
        }
    )
    assert config.cluster.neuron_nodes.instance_type == "trn2u.48xlarge"
