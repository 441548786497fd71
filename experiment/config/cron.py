"""The longest gap between two runs of a cron schedule, so settings that must outlast it
(``guardrails.probe.stale_after_s``) are checked offline.

Kubernetes CronJob syntax (robfig/cron's standard parser, kubernetes docs "CronJob",
"Schedule syntax"): five fields, minute hour day-of-month month day-of-week; each a ``*``, a
number, a range ``a-b``, any of these with a step ``/n``, or a comma-separated list of them;
day of week 0-7 (0 and 7 are Sunday); the macros ``@yearly`` ``@annually`` ``@monthly``
``@weekly`` ``@daily`` ``@midnight`` ``@hourly``. As in cron, when both day fields are
restricted a day matching either runs. Month and weekday names are not accepted here.
"""

from __future__ import annotations

import datetime as dt
import itertools

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day of month", 1, 31), ("month", 1, 12),
           ("day of week", 0, 7))  # fmt: skip
# Over 8 years every weekday falls on every date of every month, leap days included.
_SPAN_DAYS = 8 * 366


def _values(text: str, name: str, low: int, high: int) -> set[int]:
    found: set[int] = set()
    for part in text.split(","):
        base, _, step_text = part.partition("/")
        if step_text and not step_text.isdigit():
            raise ValueError(f"cron {name} step {step_text!r} is not a number")
        step = int(step_text) if step_text else 1
        if step < 1:
            raise ValueError(f"cron {name} step must be at least 1")
        if base == "*":
            first, last = low, high
        elif "-" in base:
            first_text, _, last_text = base.partition("-")
            if not (first_text.isdigit() and last_text.isdigit()):
                raise ValueError(f"cron {name} range {base!r} is not two numbers")
            first, last = int(first_text), int(last_text)
        elif base.isdigit():
            first = int(base)
            last = high if step_text else first
        else:
            raise ValueError(f"cron {name} {base!r} is not *, a number or a range")
        if not low <= first <= last <= high:
            raise ValueError(f"cron {name} {part!r} is outside {low}-{high}")
        found.update(range(first, last + 1, step))
    return found


def longest_gap_s(schedule: str) -> int:
    """Seconds of the longest wait between two consecutive runs of ``schedule``."""
    fields = _MACROS.get(schedule.strip(), schedule).split()
    if len(fields) != 5:
        raise ValueError(
            f"cron schedule {schedule!r} has {len(fields)} fields, not 5 (minute hour "
            "day-of-month month day-of-week), nor is it a macro such as @hourly"
        )
    minutes, hours, days, months, weekdays = (
        _values(text, name, low, high)
        for text, (name, low, high) in zip(fields, _FIELDS, strict=True)
    )
    weekdays = {day % 7 for day in weekdays}
    day_restricted, weekday_restricted = fields[2] != "*", fields[4] != "*"
    in_day = sorted(h * 60 + m for h in hours for m in minutes)
    if fields[2:] == ["*", "*", "*"]:  # every day alike: the gaps of one day, wrapped
        wrapped = [*in_day, in_day[0] + 1440]
        return 60 * max(b - a for a, b in itertools.pairwise(wrapped))
    start = dt.date(2000, 1, 1)
    runs: list[int] = []  # minutes since start
    for offset in range(_SPAN_DAYS):
        day = start + dt.timedelta(days=offset)
        if day.month not in months:
            continue
        date_ok, weekday_ok = day.day in days, day.isoweekday() % 7 in weekdays
        if day_restricted and weekday_restricted:
            matches = date_ok or weekday_ok
        else:
            matches = date_ok and weekday_ok
        if matches:
            runs.extend(offset * 1440 + minute for minute in in_day)
    if len(runs) < 2:
        raise ValueError(f"cron schedule {schedule!r} runs at most once in {_SPAN_DAYS} days")
    return 60 * max(b - a for a, b in itertools.pairwise(runs))
