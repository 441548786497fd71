"""The dashboard and the CLI render the one rule set: every recorded series is a panel,
and `python -m guardrails rules` prints exactly the rule file the renderings use."""

from __future__ import annotations

import json

import pytest
import yaml

from experiment import build_config
from guardrails.__main__ import main
from guardrails.dashboard import dashboard
from guardrails.rules import rule_set
from runtime.spec import Generation


def test_every_recorded_series_is_a_panel_and_the_alerts_are_listed() -> None:
    rules = rule_set(build_config(context={}), Generation.NEURON_PLUGIN)
    board = dashboard(rules)
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    assert exprs == [r.record for r in rules.recordings]
    assert board["panels"][-1]["type"] == "alertlist"
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    # No two panels overlap on Grafana's grid.
    cells = {(p["gridPos"]["x"], p["gridPos"]["y"]) for p in board["panels"]}
    assert len(cells) == len(board["panels"])


def test_the_cli_prints_the_rule_file_of_the_chosen_generation(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["rules", "--generation", "neuron-fork"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    expected = rule_set(build_config(context={}), Generation.NEURON_FORK).prometheus()
    assert printed == expected
    # The fork exports no speculation counters: no rule may read them.
    assert "spec_decode" not in json.dumps(printed)


def test_the_cli_follows_overrides_and_refuses_bad_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules", "-c", "experiment.guardrails.live.latency_margin=0.25"]) == 0
    assert "> 1.25" in capsys.readouterr().out
    assert main(["dashboard", "-c", "experiment.guardrails.live.window_s=1"]) == 2
    assert "guardrails.live.window_s" in capsys.readouterr().err
