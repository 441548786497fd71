"""The adaptive-k record judged and drawn (``python -m bench.adaptive_k`` measures it): the
goals, each met or missed from the record's numbers, the break-even sentence, the rendered
region of docs/tuning.md and its plot (docs/records/adaptive-k.svg)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.figures.formatting import ci, dur, x
from bench.figures.records import AdaptiveKFigures, AdaptiveKLevel, FigureRecord, Interval
from tune.predict import break_even

PLOT = "docs/records/adaptive-k.svg"  # rendered by python -m bench.figures render


def wholly_below(found: Interval) -> bool:
    """The interval lies below 1; without an interval the estimate speaks (conservative for
    a "never worse" goal: an unknown interval below 1 counts against it)."""
    return found.estimate < 1 if found.high is None else found.high < 1


def wholly_above(found: Interval) -> bool:
    """The interval lies above 1; without an interval nothing is claimed."""
    return found.low is not None and found.low > 1


def _at(level: AdaptiveKLevel, found: Interval) -> str:
    return f"{level.concurrency} ({x(found.estimate)} {ci(found)})"


def relative_error(level: AdaptiveKLevel) -> float | None:
    """(predicted - measured) / measured of the schedule's speedup (None: no prediction)."""
    if level.predicted_schedule is None:
        return None
    measured = level.schedule_speedup.estimate
    return (level.predicted_schedule.estimate - measured) / measured


@dataclass(frozen=True)
class Goal:
    name: str
    met: bool
    text: str  # what the numbers say, met or missed


def goals(f: AdaptiveKFigures) -> list[Goal]:
    """The sweep's goals, each met or missed from the record's numbers."""
    out = []
    for name, against, of in (
        ("never worse than the best fixed k", "fixed k", lambda lv: lv.schedule_over_fixed),
        ("never worse than the baseline", "baseline", lambda lv: lv.schedule_speedup),
    ):
        worse = [lv for lv in f.levels if wholly_below(of(lv))]
        text = (
            f"the interval of schedule over {against} lies wholly below 1 at no level"
            if not worse
            else "wholly below 1 at concurrency " + ", ".join(_at(lv, of(lv)) for lv in worse)
        )
        out.append(Goal(name, bool(f.levels) and not worse, text))
    # Better than the fixed k counts only where the schedule serves another k: where both
    # serve the same k, their ratio is two servers with the same decoding (same_k_text).
    differing = [lv for lv in f.levels if lv.schedule_k != f.fixed_k]
    for name, against, of, among in (
        (
            "better than the best fixed k somewhere",
            "fixed k",
            lambda lv: lv.schedule_over_fixed,
            differing,
        ),
        (
            "better than the baseline somewhere",
            "baseline",
            lambda lv: lv.schedule_speedup,
            f.levels,
        ),
    ):
        better = [lv for lv in among if wholly_above(of(lv))]
        where = "at no level" if among is f.levels else "at no level where the k differs"
        text = (
            "wholly above 1 at concurrency " + ", ".join(_at(lv, of(lv)) for lv in better)
            if better
            else f"the interval of schedule over {against} lies wholly above 1 {where}"
        )
        out.append(Goal(name, bool(better), text))
    held = f.held_out()
    errors = [(lv, relative_error(lv)) for lv in held]
    within = [lv for lv, e in errors if e is not None and abs(e) <= f.tolerance]
    listed = ", ".join(
        f"{lv.concurrency}: " + ("not predicted" if e is None else f"{e * 100:+.1f}%")
        for lv, e in errors
    )
    out.append(
        Goal(
            f"predicted within {f.tolerance:.0%} on the held-out levels",
            bool(held) and len(within) == len(held),
            f"{len(within)} of {len(held)} held-out levels within ({listed})"
            if held
            else "no held-out level was measured",
        )
    )
    return out


def same_k_text(f: AdaptiveKFigures) -> str | None:
    """What the levels where the schedule serves the fixed k's own k say: schedule / fixed k
    there compares two servers with the same decoding, so it measures the servers' own
    difference (placement on the cores, the order of the blocks), the noise floor of every
    schedule / fixed k comparison. None: the k differs at every level."""
    same = [lv for lv in f.levels if lv.schedule_k == f.fixed_k]
    if not same:
        return None
    shown = ", ".join(_at(lv, lv.schedule_over_fixed) for lv in same)
    beyond = [lv for lv in same if wholly_above(lv.schedule_over_fixed)]
    beyond += [lv for lv in same if wholly_below(lv.schedule_over_fixed)]
    lead = (
        f"Where the schedule serves the fixed k's own k={f.fixed_k} (concurrency {shown}), "
        "schedule / fixed k compares two servers with the same decoding: "
    )
    if not beyond:
        return lead + "within the noise at every such level, as it should be."
    levels = ", ".join(str(lv.concurrency) for lv in sorted(beyond, key=lambda lv: lv.concurrency))
    return lead + (
        f"beyond the noise at concurrency {levels}, so the servers themselves differ by that "
        "much at the same k, and a schedule / fixed k difference of that size at another "
        "level is not the schedule's doing."
    )


def break_even_text(
    f: AdaptiveKFigures, name: str, of: Callable[[AdaptiveKLevel], Interval]
) -> str:
    """Where a policy stops paying against the baseline, from the point estimates: it pays
    at a level whose estimate is at least 1; the crossing is tune.predict.break_even's (the
    first one going up in load, linear between levels)."""
    points = [(lv.concurrency, of(lv).estimate) for lv in f.levels]
    paying = [c for c, e in points if e >= 1]
    if len(paying) == len(points):
        return f"{name} pays at every level measured"
    if not paying:
        return f"{name} pays at no level measured"
    if points[0][1] < 1:
        return f"{name} pays only at concurrency {', '.join(map(str, paying))}"
    found = break_even([c for c, _ in points], [e for _, e in points])
    assert found is not None  # some level does not pay, the first does
    again = [c for c in paying if c > found]
    return f"{name} stops paying above ~{found:.1f} concurrent requests" + (
        f" (and pays again at concurrency {', '.join(map(str, again))})" if again else ""
    )


# --- the rendering ----------------------------------------------------------------------------


def _schedule_text(entries: Sequence[Sequence[int]]) -> str:
    return "[" + ", ".join(f"[{a}, {b}, {k}]" for a, b, k in entries) + "]"


def _k_per_step(level: AdaptiveKLevel, policy: str) -> str:
    drafts, tokens = level.drafts.get(policy), level.draft_tokens.get(policy)
    if drafts is None or tokens is None:
        return "-"
    return "no drafts" if drafts == 0 else f"{tokens / drafts:.2f}"


def region_text(record: FigureRecord, f: AdaptiveKFigures) -> str:
    """docs/tuning.md's region: what was run, the table by level, the plot, the goals and
    the break-even, every verdict computed from the numbers."""
    fit = ", ".join(str(c) for c in f.fit_levels)
    n_values = sorted({lv.schedule_speedup.n for lv in f.levels})
    n_text = "/".join(str(n) for n in n_values)
    rows = [
        f"Measured {record.day}, {record.machine.text()}: **{dur(f.wall_s)}** "
        f"(the tuning sweep {dur(f.tuning_wall_s)} with {f.tuning_server_starts} "
        f"server starts, the three servers' start-up {dur(f.startup_s)}, the sweep "
        f"{dur(f.sweep_wall_s)}). The tuning (step costs at concurrency {fit}, "
        f"`local.max_num_seqs` {f.max_num_seqs}) chose **{f.draft} k={f.fixed_k}** as the best "
        f"fixed k and the schedule **{_schedule_text(f.schedule)}** (served with the drafter "
        f"at k={f.schedule_max_k}). At every concurrency the three servers ran the same "
        f"{f.prompts} prompts x {f.requests_per_prompt} ({f.max_tokens} output tokens each) in "
        f"interleaved blocks of {f.block_requests} requests; n = {n_text} requests served by "
        "all three per level.",
        "",
        "| concurrency | schedule k | fixed k / baseline | schedule / baseline "
        "| schedule / fixed k | schedule predicted | error | drafted per step (fixed / "
        "schedule) | load |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for lv in f.levels:
        role = "fit" if lv.fit else "held out"
        pred = lv.predicted_schedule
        if pred is None:
            shown = "-"
        elif lv.schedule_k == 0 and pred.n == 0:
            shown = "1.00x (k=0 taken as the baseline)"
        else:
            shown = f"{x(pred.estimate)} {ci(pred)}"
        error = relative_error(lv)
        rows.append(
            f"| {lv.concurrency} ({role}) | {lv.schedule_k} "
            f"| {x(lv.fixed_speedup.estimate)} {ci(lv.fixed_speedup)} "
            f"| {x(lv.schedule_speedup.estimate)} {ci(lv.schedule_speedup)} "
            f"| {x(lv.schedule_over_fixed.estimate)} {ci(lv.schedule_over_fixed)} "
            f"| {shown} | {'-' if error is None else f'{error * 100:+.1f}%'} "
            f"| {_k_per_step(lv, 'fixed')} / {_k_per_step(lv, 'schedule')} "
            f"| {'-' if lv.load_average_1m is None else f'{lv.load_average_1m:.1f}'} |"
        )
    failed = sum(sum(lv.failed.values()) for lv in f.levels)
    rows += [
        "",
        "Speedups: mean E2E of the baseline (or the fixed k) over mean E2E of the policy, paired"
        " by request, 95% expanded percentile bootstrap of the load test (`loadtest.stats`); "
        f"{failed} requests failed. Predicted: tune/schedule.py's speedup at that batch size "
        "for the schedule's k, interpolated between the fit levels at the held-out ones; load:"
        f" the 1-minute load average at the level's start on the {record.machine.cores} cores "
        "(the sweep's own server and load generator count in it).",
        "",
        f"![Speedup over the baseline by concurrency: fixed k and schedule, with 95% intervals]"
        f"({Path(PLOT).relative_to('docs').as_posix()})",
        "",
        *[
            f"- The schedule {g.name}: **{'met' if g.met else 'missed'}** ({g.text})."
            for g in goals(f)
        ],
        *(["", same] if (same := same_k_text(f)) else []),
        "",
        "Break-even (point estimates, linear between levels): "
        f"{break_even_text(f, f'the fixed k ({f.draft} k={f.fixed_k})', _fixed)}; "
        f"{break_even_text(f, 'the schedule', _scheduled)}.",
    ]
    return "\n".join(rows)


def _fixed(level: AdaptiveKLevel) -> Interval:
    return level.fixed_speedup


def _scheduled(level: AdaptiveKLevel) -> Interval:
    return level.schedule_speedup


# --- the plot (SVG text: rendered and checked like the documents, byte for byte) -------------

WIDTH, HEIGHT = 680, 400
LEFT, RIGHT, TOP, BOTTOM = 64, 170, 36, 52
INSET = 20  # between the axes and the first and last level
COLOURS = {"fixed": "#1f77b4", "schedule": "#d62728", "predicted": "#d62728"}


def _ticks(low: float, high: float) -> list[float]:
    """Round tick values covering [low, high], about five of them."""
    raw = (high - low) / 5
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.floor(low / step) * step
    count = math.ceil((high - first) / step - 1e-9)
    return [round(first + i * step, 10) for i in range(count + 1)]


def plot_svg(f: AdaptiveKFigures) -> str:
    """Speedup over the baseline against concurrency: one line per policy (fixed k,
    schedule) with its 95% interval, the schedule's predictions as open diamonds, the
    baseline at 1. Plain SVG written here (no plotting library: the file is checked byte
    for byte against a fresh render, which must not change with a library's version)."""
    levels = [lv.concurrency for lv in f.levels]
    values = [1.0]
    for lv in f.levels:
        for found in (lv.fixed_speedup, lv.schedule_speedup, lv.predicted_schedule):
            if found is not None:
                values += [v for v in (found.estimate, found.low, found.high) if v is not None]
    ticks = _ticks(min(values), max(values))
    y_low, y_high = ticks[0], ticks[-1]
    x_low, x_high = math.log2(min(levels or [1])), math.log2(max(levels or [2]))
    span_x = (x_high - x_low) or 1.0
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(level: float, shift: float = 0.0) -> float:
        # the levels inset from the axes, so the bars and diamonds beside them stay inside
        inner = plot_w - 2 * INSET
        return LEFT + INSET + (math.log2(level) - x_low) / span_x * inner + shift

    def py(value: float) -> float:
        return TOP + (y_high - value) / (y_high - y_low) * plot_h

    def num(value: float) -> str:
        return f"{value:.1f}"

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{num(LEFT + plot_w / 2)}" y="20" text-anchor="middle" font-size="14">'
        f"Speedup over the baseline by load ({f.draft}, {f.max_tokens} tokens)</text>",
    ]
    for tick in ticks:
        at = num(py(tick))
        out.append(f'<line x1="{LEFT}" y1="{at}" x2="{LEFT + plot_w}" y2="{at}" stroke="#dddddd"/>')
        out.append(
            f'<text x="{LEFT - 6}" y="{at}" text-anchor="end" dominant-baseline="middle">'
            f"{tick:g}</text>"
        )
    for level in levels:
        out.append(
            f'<text x="{num(px(level))}" y="{TOP + plot_h + 18}" text-anchor="middle">'
            f"{level}</text>"
        )
    out += [
        f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{LEFT + plot_w}" y2="{TOP + plot_h}" '
        'stroke="black"/>',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + plot_h}" stroke="black"/>',
        f'<text x="{num(LEFT + plot_w / 2)}" y="{HEIGHT - 12}" text-anchor="middle">'
        "concurrent requests (log scale)</text>",
        f'<text x="16" y="{num(TOP + plot_h / 2)}" text-anchor="middle" '
        f'transform="rotate(-90 16 {num(TOP + plot_h / 2)})">E2E speedup over the baseline</text>',
        f'<line x1="{LEFT}" y1="{num(py(1.0))}" x2="{LEFT + plot_w}" y2="{num(py(1.0))}" '
        'stroke="black" stroke-dasharray="6 4"/>',
    ]
    series: list[tuple[str, str, float, Callable[[AdaptiveKLevel], Interval]]] = [
        ("fixed", f"fixed k={f.fixed_k}", -4.0, _fixed),
        ("schedule", "schedule", 4.0, _scheduled),
    ]
    for key, _, shift, of in series:
        colour = COLOURS[key]
        points = " ".join(
            f"{num(px(lv.concurrency, shift))},{num(py(of(lv).estimate))}" for lv in f.levels
        )
        out.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for lv in f.levels:
            found = of(lv)
            at = num(px(lv.concurrency, shift))
            if found.low is not None and found.high is not None:
                out.append(
                    f'<line x1="{at}" y1="{num(py(found.low))}" x2="{at}" '
                    f'y2="{num(py(found.high))}" stroke="{colour}"/>'
                )
            out.append(
                f'<circle cx="{at}" cy="{num(py(found.estimate))}" r="3.5" fill="{colour}"/>'
            )
    for lv in f.levels:
        pred = lv.predicted_schedule
        if pred is None:
            continue
        cx, cy = px(lv.concurrency, 10.0), py(pred.estimate)
        out.append(
            f'<polygon points="{num(cx)},{num(cy - 5)} {num(cx + 5)},{num(cy)} '
            f'{num(cx)},{num(cy + 5)} {num(cx - 5)},{num(cy)}" fill="none" '
            f'stroke="{COLOURS["predicted"]}"/>'
        )
    legend_x, legend_y = LEFT + plot_w + 14, TOP + 10
    entries = [
        (f'<line x1="0" y1="0" x2="20" y2="0" stroke="{COLOURS[key]}" stroke-width="2"/>', label)
        for key, label, _, _ in series
    ]
    entries.append(
        (
            f'<polygon points="10,-5 15,0 10,5 5,0" fill="none" stroke="{COLOURS["predicted"]}"/>',
            "schedule predicted",
        )
    )
    entries.append(
        ('<line x1="0" y1="0" x2="20" y2="0" stroke="black" stroke-dasharray="6 4"/>', "baseline")
    )
    for i, (mark, label) in enumerate(entries):
        out.append(
            f'<g transform="translate({legend_x} {legend_y + 20 * i})">{mark}'
            f'<text x="26" y="0" dominant-baseline="middle">{label}</text></g>'
        )
    out.append(
        f'<text x="{legend_x}" y="{legend_y + 20 * len(entries) + 6}" font-size="10">'
        "bars: 95% intervals</text>"
    )
    out.append("</svg>")
    return "\n".join(out) + "\n"


# --- the command ------------------------------------------------------------------------------
