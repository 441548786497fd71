"""loadtest.arms_mode without processes: the setting and its layering, the master ports, the
shared start instant, the timing the summary derives and the report's mode lines."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from experiment import build_config
from experiment.config import Arm, ArmsMode
from experiment.loading import ConfigError
from loadtest.arms import (
    START_MARGIN_S,
    announce_ready,
    arms_timing,
    check_ports_free,
    ready_file,
    shared_start,
    timing_warnings,
)
from loadtest.plan import build_plan, local_scale
from loadtest.render.tables import arms_lines
from loadtest.window import WindowMeta


def test_concurrent_for_the_cluster_and_cli_alternating_for_the_local_run() -> None:
    config = build_config({})
    assert config.loadtest.arms_mode is ArmsMode.CONCURRENT
    # The local run's servers share the cores: its layer says alternating (measured to
    # spread less than sequential: tests/bench/test_arms_spread.py), visibly.
    assert config.local.arms_mode is ArmsMode.ALTERNATING
    assert local_scale(config).loadtest.arms_mode is ArmsMode.ALTERNATING
    chosen = build_config({"local.arms_mode": "concurrent"})
    assert local_scale(chosen).loadtest.arms_mode is ArmsMode.CONCURRENT
    with pytest.raises(ConfigError, match="arms_mode"):
        build_config({"loadtest.arms_mode": "interleaved"})


def test_concurrent_arms_each_get_the_whole_time_bound(tmp_path) -> None:
    def budget(mode: str) -> float:
        config = build_config({"loadtest.arms_mode": mode, "loadtest.max_duration_s": "100"})
        return build_plan(config, Arm.BASELINE, "http://a", tmp_path).shape.max_duration_s

    assert budget("concurrent") == pytest.approx(90)  # 100 minus the 10% reserve
    assert budget("sequential") == pytest.approx(45)  # one after the other: half each


@pytest.mark.process
def test_master_ports_are_derived_and_a_taken_one_names_the_setting() -> None:
    def ports(mode: str, base: int = 5557) -> list[int]:
        config = build_config({"loadtest.arms_mode": mode, "loadtest.master_port": str(base)})
        return [config.loadtest.master_port_of(arm) for arm in Arm]

    assert ports("sequential") == [5557, 5557]  # one master at a time: one port
    assert ports("concurrent") == [5557, 5558]  # both at once: one each, in the arms' order
    assert ports("concurrent", 65534) == [65534, 65535]
    assert ports("sequential", 65535) == [65535, 65535]
    with pytest.raises(ConfigError, match=r"set loadtest\.master_port to at most 65534"):
        ports("concurrent", 65535)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ValueError, match=r"loadtest\.master_port"):
            check_ports_free([port - 1, port] if port > 1024 else [port, port + 1])
    check_ports_free([port])  # closed again: free


def test_both_arms_derive_one_start_instant_from_the_later_ready_file(tmp_path) -> None:
    config = build_config({})
    files = [str(ready_file(tmp_path, arm.value)) for arm in Arm]
    plans = {arm: build_plan(config, arm, "http://a", tmp_path) for arm in Arm}
    for plan in plans.values():
        plan.ready_files = files
    assert shared_start(files) is None
    announce_ready(plans[Arm.BASELINE], 1000.0)
    assert shared_start(files) is None  # the other arm is still warming up
    announce_ready(plans[Arm.SPECULATIVE], 1003.5)
    assert shared_start(files) == pytest.approx(1003.5 + START_MARGIN_S)
    assert not list(Path(tmp_path).glob("*.tmp"))


def _meta(arm: str, launched: float, elapsed: float, first: float | None) -> WindowMeta:
    return WindowMeta(arm=arm, launched_wall=launched, elapsed_s=elapsed, first_request_wall=first)


def test_timing_gives_the_wall_time_saved_and_warns_on_a_late_arm() -> None:
    together = {
        "baseline": _meta("baseline", 100.0, 50.0, 110.0),
        "speculative": _meta("speculative", 100.1, 40.0, 110.3),
    }
    timing = arms_timing("concurrent", together)
    assert timing is not None
    assert timing.run_elapsed_s == pytest.approx(50.0)
    assert timing.wall_saved_s == pytest.approx(40.0)
    assert timing.start_spread_s == pytest.approx(0.3)
    assert timing_warnings(timing) == []
    in_turn = {
        "baseline": _meta("baseline", 100.0, 50.0, 110.0),
        "speculative": _meta("speculative", 150.0, 40.0, 160.0),
    }
    sequential = arms_timing("sequential", in_turn)
    assert sequential is not None and sequential.wall_saved_s == pytest.approx(0.0)
    assert timing_warnings(sequential) == []  # far apart by design
    late = arms_timing(
        "concurrent", {**together, "speculative": _meta("speculative", 100, 40, 112)}
    )
    assert late is not None and "2.0 s apart" in timing_warnings(late)[0]
    assert arms_timing(None, together) is None  # a run from before the setting


def test_report_header_states_mode_pairing_and_the_time_saved(fake_run_dir) -> None:
    from loadtest.summary import summarize

    summary = summarize(fake_run_dir)
    assert arms_lines(summary) == []  # a run directory from before arms_mode
    summary.run.arms_mode = "concurrent"
    summary.arms_timing = arms_timing(
        "concurrent",
        {
            "baseline": _meta("baseline", 100.0, 50.0, 110.0),
            "speculative": _meta("speculative", 100.0, 40.0, 110.25),
        },
    )
    text = " ".join(arms_lines(summary))
    assert "Arms: concurrent," in text and "sent to both arms together" in text
    assert "0.25 s apart" in text and "40 s less than the arms one after the other (90 s)" in text
    summary.run.arms_mode = "sequential"
    summary.arms_timing = None
    text = " ".join(arms_lines(summary))
    assert "Arms: sequential," in text and "measured at different times" in text


def test_worker_pods_of_another_count_than_the_config_are_refused_before_anything_runs(
    tmp_path,
) -> None:
    """The worker pods are loadtest.workers per arm: a master told to expect another count
    would wait for workers that never come."""
    from loadtest.runner import run_comparison

    config = build_config({"loadtest.workers": "2"})
    out = tmp_path / "run"
    with pytest.raises(ValueError, match=r"worker pods are loadtest\.workers \(2\)"):
        run_comparison(config, "http://a", "http://b", out, workers=3, local_workers=False)
    assert not out.exists()
