"""The support calendar's clock in the tests: every synth reads a fixed day (tests/conftest.py,
``calendar_clock``), so a checkout passes its tests on any date; ``upstreams.as_of`` moves it
for one synth; and one test reads the real date, warning (not failing) as an end nears."""

from __future__ import annotations

import json
import warnings
from datetime import date

import pytest

from experiment import ConfigError, build_config
from experiment.config import upstreams
from experiment.config.upstreams import UPSTREAMS, last_checked

DEPLOY_PINS = {
    "experiment.routing.eks.gateway_api_plugin_sha256": "0" * 64,
    "experiment.cluster.s3_csi_addon_version": "v2.1.0-eksbuild.1",
    "experiment.cluster.cloudwatch_addon_version": "v4.1.0-eksbuild.1",
    "experiment.model_store.hub_revisions": json.dumps(
        {"Qwen/Qwen3-32B": "1" * 40, "Qwen/Qwen3-1.7B": "2" * 40}
    ),
}


class CalendarWarning(UserWarning):
    """A pinned upstream's support ends soon (or has ended) by the real date."""


def test_every_test_reads_the_calendar_on_the_day_it_was_last_checked(calendar_clock) -> None:
    assert calendar_clock == last_checked() == upstreams.today()
    config = build_config(DEPLOY_PINS, for_eks=True)  # the default deploy, in support that day
    assert config.upstreams.on() == calendar_clock
    assert config.calendar().refusals == []


def test_as_of_reads_the_calendar_on_another_day() -> None:
    with pytest.raises(ConfigError, match=r"envoy-gateway v1\.9\.3: support ended 2027-02-14"):
        build_config({**DEPLOY_PINS, "experiment.upstreams.as_of": "2027-03-01"}, for_eks=True)
    planned = build_config({**DEPLOY_PINS, "experiment.upstreams.as_of": "2027-02-01"})
    assert planned.upstreams.on() == date(2027, 2, 1)
    assert any("envoy-gateway" in w and "in 13 days" in w for w in planned.calendar().warnings)
    with pytest.raises(ConfigError, match=r"upstreams\.as_of"):
        build_config({"experiment.upstreams.as_of": "next week"})


def test_the_real_calendar_warns_as_an_end_date_nears() -> None:
    """The one test that reads the real date: it warns, never fails, on a pin whose support
    ends within upstreams.warn_days (or has ended); move the pin (docs/upstreams.md)."""
    real = date.today()
    horizon = build_config({}).upstreams.warn_days
    for row in UPSTREAMS:
        if row.end_of_support is None:
            continue
        # What the calendar can hold: a pin was in support on the day it was checked.
        assert row.checked < row.end_of_support, f"{row.name}: checked after its end"
        left = row.days_left(real)
        if left is not None and left <= horizon:
            state = f"ended {-left} days ago" if left <= 0 else f"ends in {left} days"
            warnings.warn(
                CalendarWarning(
                    f"support calendar on {real}: {row.name} {row.version} {state} "
                    f"({row.end_of_support}, {row.end_source}); tests still pass on their fixed "
                    f"day ({last_checked()}), but synth refuses it from {row.end_of_support} "
                    f"on unless acknowledged: move {row.setting or 'the pin'}"
                ),
                stacklevel=1,
            )
