"""Cost per 1M output tokens from configured prices (loadtest/cost.py, config.pricing)."""

from __future__ import annotations

import pytest

from experiment import ConfigError, build_config
from loadtest.cost import (
    NO_SWEEP,
    cost_summary,
    optimal_load,
    price_basis,
    scope_cost,
    usd_per_million,
)
from loadtest.records import RequestRecord
from loadtest.results import Interval, PriceBasis

PRICED = {
    "experiment.pricing.neuron.capacity-block.usd_per_hour": "30",
    "experiment.pricing.neuron.capacity-block.source": "our Capacity Block offer",
    "experiment.pricing.neuron.capacity-block.as_of": "2026-10-01",
    "experiment.cluster.neuron_nodes.capacity_type": "capacity-block",
    "experiment.cluster.neuron_nodes.capacity_reservation_id": "cr-0123456789abcdef0",
    "experiment.cluster.neuron_nodes.availability_zone": "us-east-2b",
}


def test_trn2_arm_pays_its_share_of_the_instance_at_its_capacity_type() -> None:
    config = build_config({**PRICED})
    basis = price_basis(config, local=False)
    assert (basis.capacity_type, basis.instance_usd_per_hour) == ("capacity-block", 30.0)
    assert (basis.devices_claimed, basis.devices_per_instance) == (8, 16)  # defaults: 8 of 16
    assert basis.arm_usd_per_hour == pytest.approx(15.0)
    assert basis.source == "our Capacity Block offer" and basis.as_of == "2026-10-01"
    assert basis.nominal is False


def test_default_prices_are_labelled_nominal() -> None:
    config = build_config({})
    assert price_basis(config, local=False).nominal
    local = price_basis(config, local=True)
    assert local.nominal and local.target == "local"
    assert local.arm_usd_per_hour == config.pricing.local.usd_per_hour  # the whole machine


def test_a_price_without_source_and_date_is_rejected_with_what_to_give() -> None:
    with pytest.raises(ConfigError, match=r"pricing\.neuron\.on-demand\.source"):
        build_config({"experiment.pricing.neuron.on-demand.usd_per_hour": "30"})
    with pytest.raises(ConfigError, match="usd_per_hour"):
        build_config({"experiment.pricing.local.usd_per_hour": "0"})


def test_the_run_context_not_the_url_chooses_the_price(tmp_path, monkeypatch) -> None:
    """A trn2 service port-forwarded to 127.0.0.1:8101 (the local baseline's port) is priced
    as trn2; the local run (local=True) as the CPU machine, whatever its URLs."""
    import json

    from loadtest import runner

    monkeypatch.setattr(runner, "run_arms", lambda *args, **kwargs: None)  # no Locust here
    monkeypatch.setattr(runner, "write_report", lambda *args, **kwargs: None)
    config = build_config({})
    forwarded = ("http://127.0.0.1:8101", "http://127.0.0.1:8102")
    for local, target in ((False, "trn2"), (True, "local")):
        out = tmp_path / target
        runner.run_comparison(config, *forwarded, out, local=local)
        analysis = json.loads((out / "run.json").read_text())["analysis"]
        assert analysis["price"]["target"] == target, local


def test_usd_per_million_tokens() -> None:
    assert usd_per_million(36.0, 10.0) == pytest.approx(1000.0)  # 0.01 $/s over 10 tok/s
    assert usd_per_million(36.0, 0.0) is None and usd_per_million(36.0, None) is None


def test_optimal_load_is_the_highest_throughput_and_fewer_users_on_ties() -> None:
    point = optimal_load({1: 100.0, 4: 360.0, 8: 360.0, 16: None}, arm_usd_per_hour=36.0)
    assert point is not None
    assert (point.concurrency, point.output_throughput_tok_s) == (4, 360.0)
    assert point.usd_per_million_output_tokens == pytest.approx(36 / 3600 / 360 * 1e6)
    assert optimal_load({2: None}, arm_usd_per_hour=1.0) is None


def _record(arm: str, index: int, cls: str, e2e: float, tokens: int, ok: bool = True):
    return RequestRecord(
        arm=arm,
        index=index,
        prompt_id=f"p{index}",
        prompt_class=cls,
        e2e_s=e2e,
        output_tokens=tokens,
        error=None if ok else "timeout",
    )


def test_class_pays_its_share_of_the_busy_time() -> None:
    config = build_config({})
    local = price_basis(config, local=True).model_dump()
    # 1 USD per second: costs read as seconds per 1M tokens
    basis = PriceBasis.model_validate({**local, "instance_usd_per_hour": 3600.0})
    measured = {
        # baseline: 4 s busy in a 2 s window (concurrency 2); class a took 3 s of it
        "baseline": [_record("baseline", 0, "a", 3.0, 300), _record("baseline", 1, "b", 1.0, 100)],
        # SD: same tokens in half the time; a failed request still holds the arm
        "speculative": [
            _record("speculative", 0, "a", 1.5, 300),
            _record("speculative", 1, "b", 0.5, 100),
            _record("speculative", 2, "b", 0.5, 0, ok=False),
        ],
    }
    windows = {"baseline": 2.0, "speculative": 1.25}
    ratio = Interval(estimate=2.0, low=1.5, high=2.5, n=2, confidence=0.95)
    a_only = {arm: [r for r in rs if r.prompt_class == "a"] for arm, rs in measured.items()}
    cost = scope_cost(basis, a_only, measured, windows, ratio)
    # baseline: 1 $/s x 2 s window x 3/4 of the busy time / 300 tokens x 1e6
    assert cost.usd_per_million_output_tokens["baseline"] == pytest.approx(2 * 0.75 / 300 * 1e6)
    assert cost.busy_share["speculative"] == pytest.approx(1.5 / 2.5)
    # cost ratio = concurrency(base) / concurrency(SD) / busy-rate ratio = (4/2)/(2.5/1.25)/2
    assert cost.ratio.estimate == pytest.approx(0.5)
    assert (cost.ratio.low, cost.ratio.high) == (pytest.approx(1 / 2.5), pytest.approx(1 / 1.5))
    assert cost.ratio.significant


def test_overall_cost_is_price_over_run_throughput_and_no_sweep_is_said() -> None:
    config = build_config({})
    basis = price_basis(config, local=True)
    measured = {
        "baseline": [_record("baseline", i, "a", 1.0, 100) for i in range(4)],
        "speculative": [_record("speculative", i, "a", 0.5, 100) for i in range(4)],
    }
    windows = {"baseline": 2.0, "speculative": 1.0}
    same = Interval(estimate=2.0, low=2.0, high=2.0, n=4, confidence=0.95)
    summary = cost_summary(basis, measured, windows, {None: same, "a": same})
    overall = summary.overall.usd_per_million_output_tokens
    assert overall["baseline"] == pytest.approx(usd_per_million(basis.arm_usd_per_hour, 200.0))
    assert overall["speculative"] == pytest.approx(usd_per_million(basis.arm_usd_per_hour, 400.0))
    assert summary.overall.ratio.estimate == pytest.approx(0.5)
    assert summary.at_optimal_load is None and summary.optimal_load_note == NO_SWEEP
    swept = cost_summary(
        basis, measured, windows, {None: same, "a": same}, sweep={"baseline": {1: 50.0, 2: 80.0}}
    )
    assert swept.at_optimal_load is not None
    assert swept.at_optimal_load["baseline"].concurrency == 2 and swept.optimal_load_note is None


def test_run_json_analysis_prices_local_servers_locally_with_their_k() -> None:
    from loadtest.analysis import analysis_info

    config = build_config({"experiment.local.num_speculative_tokens": "3"})
    info = analysis_info(config, local=True)
    assert info.price.target == "local" and info.num_speculative_tokens == 3
    remote = analysis_info(config)
    assert remote.price.target == "trn2"
    assert remote.num_speculative_tokens == config.serving.num_speculative_tokens
    assert info.statistics == config.statistics
    # Without a local k the local run serves the trn2 deployment's.
    assert analysis_info(build_config({}), local=True).num_speculative_tokens == 7
