"""``python -m bench.adaptive_k``: the speculation schedule against the best fixed k and the
baseline, at every load, on real vLLM (CPU) servers of the local miniature.

First the tuning: the local sweep (``tune.local.run_local_sweep``) sized like its quick mode
(every local draft at k = 1 and 3, one request per prompt, predictions up to k = 4) but with
``--max-tokens`` output tokens (default 64, the tuning's default; quick mode's 16 are mostly
the first token's time, where no k pays), ``tuning.concurrency`` at the fit levels
(``--fit-levels``, default 1, 4, 16) and ``local.max_num_seqs`` raised to the largest level,
so the step costs the schedule is derived from (tune/schedule.py) are measured at several
batch sizes. It gives the best fixed k (the recommendation for all classes) and the schedule
of the same draft. The levels of ``--levels`` that are not fit levels (default 2 and 8) are
held out: the schedule's prediction there (tune/schedule.py's ``BatchPrediction``,
interpolated between the measured batch sizes) is checked against the measurement.

Then three servers, started once and kept up for the whole sweep (the miniature's servers
are small: one GiB of KV cache each), rendered from the same config as the tuning's
candidates (``config.local_serving_spec``, ``runtime.render``) and differing only in
decoding: the baseline; the draft at the best fixed k; the draft started at the schedule's
largest k with ``serving.speculation_schedule`` (vLLM's ``num_speculative_tokens_per_batch_size``).
Their compute is bound by vLLM itself, as the tuning's single server was (three servers on
two cores cannot have a core each, and only one of them is loaded at a time).

At every level the three run the same schedule of requests (the local prompt suite,
``--requests-per-prompt`` times each, the tuning's output length, temperature 0,
``ignore_eos``) as three arms of the load test in alternating mode
(``loadtest.runner.run_arms``, loadtest/alternating.py): blocks of ``--block-requests``
measured requests in mirrored rounds, baseline fixed schedule, schedule fixed baseline, ...,
each block on one server alone, each arm's warm-up in its first block. Why three arms in one
run rather than two comparisons per level (``run_comparison``, baseline vs fixed and baseline
vs schedule): the alternating runner takes any number of arms, so every pair of policies,
schedule vs fixed included, is measured in neighbouring blocks, the baseline runs once per
level instead of twice, and a drift of the machine falls on all three alike.
``run_comparison`` itself drives two serving arms (a third, the tiered gateway, runs after
them, not between). Its summary is not used: the speedups are computed here with the load
test's own paired statistics (``loadtest.stats``: ``pair_records``, ``resample_counts``,
``paired_speedups``), mean E2E over mean E2E, on the requests that succeeded under all
three policies, with one set of resamples per level shared by the three comparisons.

The goals, evaluated from the record (``goals``), never asserted: at every level the
schedule is not worse than the best fixed k (the interval of fixed / schedule E2E does not
lie wholly below 1) nor than the baseline beyond the noise; it is strictly better than each
at some level (interval wholly above 1); its predicted speedup is within the tuning's
tolerance (15%) of the measured one on the held-out levels.

Writes the figures as JSON (``--out``); ``python -m bench.figures measure adaptive-k``
records them and renders docs/tuning.md and the plot docs/records/adaptive-k.svg
(``region_text``, ``plot_svg``). Kept under ``--work-dir``: the tuning's tune.json and
tune.md, each level's run directory (plans, records, window files), the servers' logs.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.figures.adaptive_k import goals
from bench.figures.records import (
    AdaptiveKFigures,
    AdaptiveKLevel,
    Interval,
)
from experiment import build_config
from experiment.config import Arm, ArmsMode, ExperimentConfig, StatisticsConfig
from experiment.loading import context_from_pairs
from loadtest.acceptance import DRAFT_TOKENS, DRAFTS
from loadtest.metrics import ALL_CLASSES
from loadtest.plan import arm_time_budget, build_plan
from loadtest.prompts import load_prompts
from loadtest.records import RequestRecord, read_records
from loadtest.stats import pair_records, paired_speedups, resample_counts
from loadtest.window import WindowMeta
from local_run.arms import local_experiment
from local_run.models import ModelPair
from local_run.servers import LocalServers, Server, free_port, sigterm_raises
from runtime.render import render
from tune.results import SpeculationSchedule, drafter_of

POLICIES = ("baseline", "fixed", "schedule")
DEFAULT_LEVELS = (1, 2, 4, 8, 16)
DEFAULT_FIT_LEVELS = (1, 4, 16)
DEFAULT_OUT = "runs/figures/adaptive-k.json"


# --- the measurement ------------------------------------------------------------------------


# Quick mode's k and prediction range (tune/local.py QUICK_K): two fit k keep the sweep short.
SWEEP_FIT_K = (1, 3)
SWEEP_PREDICT_K_MAX = 4
DEFAULT_MAX_TOKENS = 64


def sweep_config(
    fit_levels: Sequence[int], max_num_seqs: int, port: int, max_tokens: int
) -> ExperimentConfig:
    """The defaults with the local servers batching up to ``max_num_seqs`` and the tuning's
    step costs measured at ``fit_levels`` with ``max_tokens`` output tokens, k = 1 and 3,
    one request per prompt, its one server on ``port``."""

    levels = ", ".join(str(level) for level in sorted(set(fit_levels)))
    return build_config(
        context_from_pairs(
            [
                f"local.max_num_seqs={max_num_seqs}",
                f"tuning.concurrency=[{levels}]",
                f"tuning.port={port}",
                f"tuning.fit_k=[{', '.join(map(str, SWEEP_FIT_K))}]",
                "tuning.holdout_k=[]",
                f"tuning.predict_k_max={SWEEP_PREDICT_K_MAX}",
                "tuning.requests_per_prompt=1",
                f"tuning.max_tokens={max_tokens}",
                "tuning.budget_s=2400",
            ]
        )
    )


def policy_server(
    config: ExperimentConfig,
    pair: ModelPair,
    name: str,
    draft: str | None,
    k: int,
    schedule: list[tuple[int, int, int]] | None,
    port: int,
    log_dir: Path,
) -> Server:
    """One policy's server, rendered as the tuning's candidates are (tune.local's
    candidate_server), on its own port; ``schedule``: serving.speculation_schedule, served
    with the drafter started at ``k``."""

    local = config.local.model_copy(
        update={
            "drafter": drafter_of(draft) if draft is not None else config.local.drafter,
            "num_speculative_tokens": k or None,
            "baseline_port": port,
            "speculative_port": port,
        }
    )
    serving = config.serving.model_copy(update={"speculation_schedule": schedule})
    at_k = config.model_copy(update={"local": local, "serving": serving})
    arm = Arm.SPECULATIVE if draft is not None else Arm.BASELINE
    spec = at_k.local_serving_spec(arm, str(pair.target_dir), str(pair.draft_dir))
    return Server(
        name=name,
        command=render(spec),
        host=local.host,
        port=port,
        served_model_name=config.serving.target_model,
        log_path=log_dir / f"{name}.log",
        python=sys.executable,
    )


def schedule_k(schedule: Sequence[Sequence[int]], batch_size: int) -> int:
    """The k the schedule serves at ``batch_size``."""
    for first, last, k in schedule:
        if first <= batch_size <= last:
            return k
    raise ValueError(f"the schedule {list(schedule)} does not cover batch size {batch_size}")


def predicted(schedule: SpeculationSchedule, batch_size: int, k: int) -> Interval | None:
    """tune/schedule.py's prediction at (batch size, k). A schedule derived before k = 0 was
    priced as vLLM serves it (the drafter still runs) has no k = 0 prediction: it took k = 0
    as the baseline itself, given as 1.0 with n = 0."""
    for found in schedule.predictions:
        if found.batch_size == batch_size and found.k == k:
            speedup = found.e2e_speedup
            if speedup.estimate is None:
                return None
            return Interval(
                estimate=speedup.estimate, low=speedup.low, high=speedup.high, n=speedup.n
            )
    return Interval(estimate=1.0, n=0) if k == 0 else None


def level_statistics(
    records: dict[str, list[RequestRecord]], settings: StatisticsConfig
) -> tuple[int, dict[str, Interval]]:
    """(pairs, speedups) of one level: mean E2E over mean E2E, paired by schedule index over
    the requests every policy served, with the load test's bootstrap (one set of resamples
    for the three comparisons)."""

    served = [{r.index for r in records[name] if r.ok and not r.warmup} for name in POLICIES]
    common = set.intersection(*served)
    kept = {name: [r for r in records[name] if r.index in common] for name in POLICIES}
    resamples = resample_counts(len(common), settings)

    def speedup(slower: str, faster: str) -> Interval:
        reference, policy = pair_records(kept[slower], kept[faster]).values["e2e_ms"]
        found = paired_speedups(
            reference,
            policy,
            lower_is_better=True,
            resamples=resamples,
            settings=settings,
            stats=("mean",),
        )["mean"]
        if found.estimate is None:
            raise ValueError(f"{faster} vs {slower}: no speedup (no request served by both)")
        return Interval(estimate=found.estimate, low=found.low, high=found.high, n=found.n)

    return len(common), {
        "fixed": speedup("baseline", "fixed"),
        "schedule": speedup("baseline", "schedule"),
        "schedule_over_fixed": speedup("fixed", "schedule"),
    }


def _counter_moves(meta_path: str, arm: str) -> tuple[float | None, float | None]:
    """(drafts, draft tokens) the server counted over the arm's measured blocks."""

    meta = WindowMeta.read(meta_path, arm)
    before, after = meta.metrics_before, meta.metrics_after
    if before is None or after is None:
        return None, None

    def moved(name: str) -> float | None:
        if name not in before or name not in after:
            return None
        return float(after[name]) - float(before[name])

    return moved(DRAFTS), moved(DRAFT_TOKENS)


@dataclass(frozen=True)
class Sweep:
    """What the measurement needs besides the config."""

    levels: list[int]
    fit_levels: list[int]
    max_num_seqs: int
    max_tokens: int
    requests_per_prompt: int
    block_requests: int
    work_dir: Path


def run_sweep(sweep: Sweep, log: Callable[[str], None] = print) -> AdaptiveKFigures:
    # Here, not at the top: they load matplotlib, and the figures' render imports this module.
    from loadtest.runner import run_arms
    from tune.local import local_drafts, max_tokens, run_local_sweep
    from tune.report import write_outputs

    if max(sweep.levels) > sweep.max_num_seqs or max(sweep.fit_levels) > sweep.max_num_seqs:
        raise ValueError(f"levels above --max-num-seqs {sweep.max_num_seqs}: they would queue")
    ports: set[int] = set()
    while len(ports) < 4:
        ports.add(free_port())
    tune_port, *server_ports = sorted(ports)
    config = sweep_config(sweep.fit_levels, sweep.max_num_seqs, tune_port, sweep.max_tokens)
    began = time.monotonic()
    tune_dir = sweep.work_dir / "tune"
    log(f"adaptive-k: the tuning sweep, step costs at {sweep.fit_levels} ({tune_dir})")
    started = time.monotonic()
    result = run_local_sweep(config, tune_dir, log=log)
    tuning_wall_s = time.monotonic() - started
    write_outputs(result, tune_dir)
    overall = next((r for r in result.recommendations if r.scope == ALL_CLASSES), None)
    schedule = result.schedule
    if overall is None or schedule is None:
        raise RuntimeError(
            f"the tuning gave no {'recommendation' if overall is None else 'schedule'}: "
            + "; ".join(result.notes)
        )
    if schedule.draft != overall.draft:
        raise RuntimeError(f"schedule of {schedule.draft}, best fixed k of {overall.draft}")
    entries = [(first, last, k) for first, last, k in schedule.entries]
    max_k = max(k for _, _, k in entries)
    if max_k == 0:
        raise RuntimeError(f"the schedule {entries} never speculates: nothing to compare")
    log(f"adaptive-k: best fixed k {overall.draft} k={overall.k}; schedule {entries}")
    pairs = local_drafts(config, log)  # generated by the tuning: cached
    draft = overall.draft
    log_dir = sweep.work_dir / "servers"
    servers = [
        policy_server(config, pairs[draft], "baseline", None, 0, None, server_ports[0], log_dir),
        policy_server(
            config, pairs[draft], "fixed", draft, overall.k, None, server_ports[1], log_dir
        ),
        policy_server(
            config, pairs[draft], "schedule", draft, max_k, entries, server_ports[2], log_dir
        ),
    ]
    tokens = max_tokens(config, quick=False)  # the tuning's output length: its predictions'
    local = local_experiment(config)
    prompts = len(load_prompts(list(local.loadtest.prompts.files)))
    levels: list[AdaptiveKLevel] = []
    with sigterm_raises(), LocalServers(servers, config.local.startup_timeout_s, log) as running:
        startup_s = running.startup_seconds or 0.0
        urls = {server.name: server.url for server in running.servers}
        sweep_started = time.monotonic()
        for level in sweep.levels:
            level_started = time.monotonic()
            load = os.getloadavg()[0]
            k_here = schedule_k(entries, level)
            log(f"adaptive-k: concurrency {level} (schedule k={k_here}, load average {load:.1f})")
            loadtest = local.loadtest.model_copy(
                update={
                    "max_tokens": tokens,
                    "concurrency": level,
                    "requests_per_prompt": sweep.requests_per_prompt,
                    "arms_mode": ArmsMode.ALTERNATING,
                    "alternating_block_requests": max(sweep.block_requests, level),
                    "workers": 1,
                }
            )
            at_level = local.model_copy(update={"loadtest": loadtest})
            run_dir = sweep.work_dir / f"c{level}"
            run_dir.mkdir(parents=True, exist_ok=True)
            budget = arm_time_budget(loadtest.max_duration_s, len(POLICIES))
            plans = []
            for name in POLICIES:
                arm = Arm.BASELINE if name == "baseline" else Arm.SPECULATIVE
                plan = build_plan(
                    at_level, arm, urls[name], run_dir, max_model_len=config.local.max_model_len
                )
                plans.append(
                    dataclasses.replace(
                        plan,
                        arm=name,
                        records_path=str(run_dir / f"records_{name}.jsonl"),
                        meta_path=str(run_dir / f"window_{name}.json"),
                        variant_label=name,
                        shape=dataclasses.replace(plan.shape, max_duration_s=budget),
                    )
                )
            run_arms(
                plans,
                run_dir,
                [loadtest.master_port],
                workers=1,
                local_workers=True,
                config=loadtest,
            )
            records = {plan.arm: read_records(Path(plan.records_path)) for plan in plans}
            requests = len(plans[0].measured)
            n, speedups = level_statistics(records, config.statistics)
            counters = {plan.arm: _counter_moves(plan.meta_path, plan.arm) for plan in plans[1:]}
            levels.append(
                AdaptiveKLevel(
                    concurrency=level,
                    fit=level in sweep.fit_levels,
                    schedule_k=k_here,
                    requests=requests,
                    failed={
                        name: requests - sum(r.ok for r in found if not r.warmup)
                        for name, found in records.items()
                    },
                    fixed_speedup=speedups["fixed"],
                    schedule_speedup=speedups["schedule"],
                    schedule_over_fixed=speedups["schedule_over_fixed"],
                    predicted_schedule=predicted(schedule, level, k_here),
                    predicted_fixed=predicted(schedule, level, overall.k),
                    drafts={name: moved[0] for name, moved in counters.items()},
                    draft_tokens={name: moved[1] for name, moved in counters.items()},
                    load_average_1m=load,
                    wall_s=time.monotonic() - level_started,
                )
            )
            last = levels[-1]
            log(
                f"adaptive-k: concurrency {level}: fixed {last.fixed_speedup.estimate:.2f}x, "
                f"schedule {last.schedule_speedup.estimate:.2f}x, schedule / fixed "
                f"{last.schedule_over_fixed.estimate:.2f}x (n={n})"
            )
        sweep_wall_s = time.monotonic() - sweep_started
    plan_starts = {(run.setting.label, run.role) for run in result.runs}
    return AdaptiveKFigures(
        draft=draft,
        drafter=schedule.drafter,
        fixed_k=overall.k,
        schedule=entries,
        schedule_max_k=max_k,
        max_num_seqs=sweep.max_num_seqs,
        fit_levels=sorted(sweep.fit_levels),
        max_tokens=tokens,
        prompts=prompts,
        requests_per_prompt=sweep.requests_per_prompt,
        block_requests=sweep.block_requests,
        tolerance=result.tolerance,
        tuning_wall_s=tuning_wall_s,
        tuning_server_starts=len(plan_starts),
        startup_s=startup_s,
        sweep_wall_s=sweep_wall_s,
        levels=levels,
        wall_s=time.monotonic() - began,
        notes=list(result.notes),
    )


# --- the goals --------------------------------------------------------------------------------


def _levels(text: str) -> list[int]:
    return sorted({int(part) for part in text.split(",") if part.strip()})


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.adaptive_k", description=__doc__)
    parser.add_argument("--out", default=DEFAULT_OUT, help="the figures as JSON")
    parser.add_argument(
        "--levels", default=",".join(map(str, DEFAULT_LEVELS)), help="concurrency levels"
    )
    parser.add_argument(
        "--fit-levels",
        default=",".join(map(str, DEFAULT_FIT_LEVELS)),
        help="tuning.concurrency of the tuning sweep (the schedule's step costs)",
    )
    parser.add_argument("--max-num-seqs", type=int, default=None, help="default: the top level")
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=DEFAULT_MAX_TOKENS,
        help="output tokens per request, of the tuning and the sweep alike",
    )
    parser.add_argument("--requests-per-prompt", type=int, default=2)
    parser.add_argument("--block-requests", type=int, default=32)
    parser.add_argument("--work-dir", default=None, help="default: runs/adaptive-k-<time>")
    options = parser.parse_args(argv)
    levels, fit_levels = _levels(options.levels), _levels(options.fit_levels)
    work_dir = Path(options.work_dir or time.strftime("runs/adaptive-k-%Y%m%d-%H%M%S"))
    sweep = Sweep(
        levels=levels,
        fit_levels=fit_levels,
        max_num_seqs=options.max_num_seqs or max(levels + fit_levels),
        max_tokens=options.max_tokens,
        requests_per_prompt=options.requests_per_prompt,
        block_requests=options.block_requests,
        work_dir=work_dir,
    )
    figures = run_sweep(sweep)
    out = Path(options.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(figures.model_dump_json(indent=1) + "\n")
    for goal in goals(figures):
        print(f"goal: the schedule {goal.name}: {'met' if goal.met else 'missed'} ({goal.text})")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
