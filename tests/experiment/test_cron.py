"""The longest gap of a cron schedule (experiment/config/cron.py), hand-checkable cases."""

from __future__ import annotations

import pytest

from experiment.config.cron import longest_gap_s

HOUR, DAY = 3600, 86400


@pytest.mark.parametrize(
    ("schedule", "gap_s"),
    [
        ("*/15 * * * *", 900),
        ("0 * * * *", HOUR),
        ("5,35 */2 * * *", 90 * 60),  # :35 to the next even hour's :05
        ("@hourly", HOUR),
        ("@daily", DAY),
        ("0 9 * * 1-5", 3 * DAY),  # Friday 09:00 to Monday 09:00
        ("0 0 1 * *", 31 * DAY),  # the longest month
        ("0 0 1 * 0", 7 * DAY),  # day 1 OR Sunday: never more than a week
        ("0 0 29 2 *", 8 * 365 * DAY - 4 * 365 * DAY + DAY),  # leap days, 4 years apart
    ],
)
def test_longest_gaps(schedule: str, gap_s: int) -> None:
    assert longest_gap_s(schedule) == gap_s


@pytest.mark.parametrize(
    "schedule", ["* * * *", "60 * * * *", "*/0 * * * *", "a * * * *", "5-1 * * * *"]
)
def test_malformed_schedules_are_refused(schedule: str) -> None:
    with pytest.raises(ValueError, match="cron"):
        longest_gap_s(schedule)
