"""The local sweep: the miniature's servers, one at a time, started and stopped through
local_run's launcher; each measured with tune.measure; then the model is fitted.

Order (the machine has 2 cores, so never two servers at once):
1. the baseline at every concurrency level of ``tuning.concurrency``;
2. every candidate (each draft of the draft-model drafter, the EAGLE3 head: tuning.drafters)
   at every k of ``tuning.fit_k`` + ``tuning.holdout_k`` at concurrency 1,
   and at the other levels of ``tuning.concurrency`` for the fit k (step costs by batch size:
   the speculation schedule, tune/schedule.py);
3. the recommended (draft, k) again at the levels above 1 not yet measured (break-even load).
Every server gets the same rendered flags as the comparison's arms (config.local_serving_spec)
and differs from the baseline only in its drafter, draft and k.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from experiment.config import Arm, ExperimentConfig, LocalConfig
from experiment.config.local import Drafter
from loadtest.cost import price_basis
from loadtest.metrics import ALL_CLASSES
from loadtest.prompts import Prompt, load_prompts
from loadtest.step_model import PredictionError
from local_run.arms import local_experiment
from local_run.models import ModelPair, ensure_models
from local_run.progress import Log
from local_run.servers import LocalServers, Server, ServerError
from local_run.smoke import request_params
from runtime.render import render
from tune.analysis import (
    TOLERANCE,
    break_even_by_class,
    cost_at_load,
    fit_and_recommend,
)
from tune.measure import measure_classes
from tune.results import EAGLE3_CANDIDATE, LocalPlan, Role, Run, Setting, TuneResult, drafter_of
from tune.schedule import add_schedule
from tune.speedups import find_run

# Rough costs for the printed estimate, from a default sweep on a quiet 2-core machine
# (docs/tuning.md): ~27 s per server start and stop (cached models), ~9 ms per output token
# (concurrency 1 dominates).
EST_SERVER_START_S = 27.0
EST_TOKEN_S = 0.009
QUICK_K = (1, 3)


def candidate_names(config: ExperimentConfig) -> list[str]:
    """The sweep's candidates by name, drafter by drafter (tuning.drafters): the drafts of
    tuning.local_drafts (null: every entry of local.generator.drafts) for draft-model, the
    head (EAGLE3_CANDIDATE) for eagle3."""
    drafts = sorted(config.tuning.local_drafts or config.local.generator.drafts)
    names: list[str] = []
    for drafter in config.tuning.drafters:
        names += drafts if drafter == "draft-model" else []
        names += [EAGLE3_CANDIDATE] if drafter == "eagle3" else []
    return names


def with_drafter(local: LocalConfig, drafter: Drafter) -> LocalConfig:
    """``local`` serving ``drafter``, validated again (the head has rules of its own)."""
    try:
        return LocalConfig.model_validate({**local.model_dump(), "drafter": drafter})
    except ValidationError as err:
        raise PredictionError(f"local.drafter={drafter} (tuning.drafters): {err}") from None


def local_drafts(config: ExperimentConfig, log: Log) -> dict[str, ModelPair]:
    """The miniature's target with each candidate drafter (candidate_names): the local
    counterpart of tuning.drafts. Generated or trained first if missing (cached); the head
    through local_run's own ensure_models, whatever it trains."""
    pairs = {}
    for name in candidate_names(config):
        if name == EAGLE3_CANDIDATE:
            pairs[name] = ensure_models(with_drafter(config.local, "eagle3"), log=log)
        else:
            pairs[name] = ensure_models(config.local, log=log, draft=name)
    return pairs


def sweep_k(config: ExperimentConfig, quick: bool) -> tuple[list[int], list[int]]:
    """(fit k, held-out k): quick mode fits two small k and holds out none."""
    tuning = config.tuning
    if quick:
        return list(QUICK_K), []
    return sorted(tuning.fit_k), sorted(tuning.holdout_k)


def concurrency_levels(config: ExperimentConfig) -> list[int]:
    levels = sorted(set(config.tuning.concurrency) | {1})
    too_high = [c for c in levels if c > config.local.max_num_seqs]
    if too_high:
        raise PredictionError(
            f"tuning.concurrency {too_high} exceeds local.max_num_seqs "
            f"{config.local.max_num_seqs}: the server would queue, not batch. Lower the levels "
            "or raise local.max_num_seqs"
        )
    return levels


def local_plan(
    config: ExperimentConfig, drafts: Sequence[str], prompts: int, quick: bool
) -> LocalPlan:
    fit, holdout = sweep_k(config, quick)
    levels = concurrency_levels(config)
    runs: list[tuple[Setting, Role, list[int]]] = [(Setting(), "baseline", levels)]
    for draft in drafts:
        # The fit k at every level: their step costs by batch size give the schedule.
        runs += [(Setting(draft=draft, k=k), "fit", levels) for k in fit]
        runs += [(Setting(draft=draft, k=k), "holdout", [1]) for k in holdout]
    extra = [c for c in levels if c > 1]
    if extra:
        runs.append((Setting(draft="(recommended)", k=0), "break_even", extra))
    requests = sum(len(c) for _, _, c in runs) * prompts * requests_per_prompt(config, quick)
    tokens = max_tokens(config, quick)
    estimated = len(runs) * EST_SERVER_START_S + requests * tokens * EST_TOKEN_S
    measured = set(fit) | set(holdout)
    return LocalPlan(
        runs=runs,
        server_starts=len(runs),
        requests=requests,
        estimated_s=estimated,
        budget_s=config.tuning.budget_s,
        predicted_k=[k for k in range(1, predict_k_max(config, quick) + 1) if k not in measured],
    )


def requests_per_prompt(config: ExperimentConfig, quick: bool) -> int:
    return 1 if quick else config.tuning.requests_per_prompt


def max_tokens(config: ExperimentConfig, quick: bool) -> int:
    tokens = config.tuning.max_tokens or config.local.max_tokens
    return min(tokens, 16) if quick else tokens


def predict_k_max(config: ExperimentConfig, quick: bool) -> int:
    return max(QUICK_K) + 1 if quick else config.tuning.predict_k_max


def plan_text(plan: LocalPlan) -> str:
    lines = ["plan (local): one server at a time on this machine"]
    for setting, role, levels in plan.runs:
        label = "recommended (draft, k)" if role == "break_even" else setting.label
        lines.append(f"  {role:<10} {label:<28} concurrency {levels}")
    lines.append(
        f"  {plan.server_starts} server starts, {plan.requests} requests, estimated "
        f"{plan.estimated_s / 60:.0f} min (budget {plan.budget_s / 60:.0f} min)"
    )
    lines.append(f"  predicted, not measured: k = {plan.predicted_k}")
    return "\n".join(lines)


def candidate_server(
    config: ExperimentConfig, pair: ModelPair, draft: str | None, k: int, log_dir: Path
) -> Server:
    """A server rendered exactly like the comparison's arms, on tuning.port, with this k."""
    local = config.local.model_copy(
        update={
            "drafter": drafter_of(draft) if draft is not None else config.local.drafter,
            "num_speculative_tokens": k or None,
            "baseline_port": config.tuning.port,
            "speculative_port": config.tuning.port,
        }
    )
    # Every candidate drafts one k at every batch size: a configured schedule is not swept.
    serving = config.serving.model_copy(update={"speculation_schedule": None})
    at_k = config.model_copy(update={"local": local, "serving": serving})
    arm = Arm.SPECULATIVE if draft is not None else Arm.BASELINE
    spec = at_k.local_serving_spec(arm, str(pair.target_dir), str(pair.draft_dir))
    name = "baseline" if draft is None else f"{draft}-k{k}"
    return Server(
        name=name,
        command=render(spec),
        host=local.host,
        port=config.tuning.port,
        served_model_name=config.serving.target_model,
        log_path=log_dir / f"{name}.log",
        python=sys.executable,
    )


def _measure(
    config: ExperimentConfig,
    server: Server,
    setting: Setting,
    role: Role,
    levels: Sequence[int],
    prompts: Sequence[Prompt],
    quick: bool,
    deadline: float,
    log: Log,
) -> list[Run]:
    params = request_params(config, max_tokens(config, quick))
    runs = []
    with LocalServers([server], config.local.startup_timeout_s, log) as running:
        for level in levels:
            started = time.monotonic()
            load = os.getloadavg()[0]
            log(f"measuring {setting.label} at concurrency {level} (load average {load:.1f})")
            classes, skipped = measure_classes(
                running.servers[0].url,
                prompts,
                params,
                concurrency=level,
                repeats=requests_per_prompt(config, quick),
                deadline=deadline,
                speculative=setting.draft is not None,
                log=log,
            )
            runs.append(
                Run(
                    setting=setting,
                    role=role,
                    concurrency=level,
                    classes=classes,
                    server_ready_s=server.ready_after_s,
                    wall_s=time.monotonic() - started,
                    skipped_requests=skipped,
                    load_average_1m=load,
                )
            )
    return runs


def run_local_sweep(
    config: ExperimentConfig, out_dir: Path, *, quick: bool = False, log: Log = print
) -> TuneResult:
    started = time.monotonic()
    deadline = started + config.tuning.budget_s
    drafts = local_drafts(config, log)
    any_pair = next(iter(drafts.values()))  # every pair has the same target
    # The local suite: the trn2 prompts plus local.extra_prompt_files, as make local uses.
    prompts = load_prompts(local_experiment(config).loadtest.prompts.files)
    plan = local_plan(config, list(drafts), len(prompts), quick)
    log(plan_text(plan))
    fit, holdout = sweep_k(config, quick)
    levels = concurrency_levels(config)
    boot = config.statistics
    logs = out_dir / "servers"
    runs: list[Run] = []
    notes: list[str] = []
    todo: list[tuple[Setting, Role, list[int]]] = [(Setting(), "baseline", levels)]
    for name in drafts:
        todo += [(Setting(draft=name, k=k), "fit", levels) for k in fit]
        todo += [(Setting(draft=name, k=k), "holdout", [1]) for k in holdout]
    for step, (setting, role, at) in enumerate(todo, 1):
        if time.monotonic() > deadline:
            notes.append(f"budget of {config.tuning.budget_s:.0f}s spent: {setting.label} not run")
            continue
        log(f"[{step}/{len(todo) + 1}] {role}: {setting.label} ({time.monotonic() - started:.0f}s)")
        try:
            pair = drafts[setting.draft] if setting.draft else any_pair
            server = candidate_server(config, pair, setting.draft, setting.k, logs)
            runs += _measure(config, server, setting, role, at, prompts, quick, deadline, log)
        except ServerError as err:
            notes.append(f"{setting.label}: server failed: {str(err).splitlines()[0]}")
            log(f"server failed, continuing: {err}")
    result = TuneResult(target="local", tolerance=TOLERANCE, plan=plan, runs=runs)
    fit_and_recommend(result, {name: fit for name in drafts}, predict_k_max(config, quick), boot)
    result.notes = notes + result.notes
    overall = next((r for r in result.recommendations if r.scope == ALL_CLASSES), None)
    high = [c for c in levels if c > 1]
    if overall is not None and high and time.monotonic() < deadline:
        setting = Setting(draft=overall.draft, k=overall.k)
        if find_run(runs, setting, 1) is None:  # a predicted k: measure its c=1 point too
            high = [1, *high]
        high = [c for c in high if find_run(runs, setting, c) is None]  # a fit k: measured
        log(f"[{len(todo) + 1}/{len(todo) + 1}] break_even: {setting.label} at {high}")
        try:
            if high:
                server = candidate_server(
                    config, drafts[overall.draft], overall.draft, overall.k, logs
                )
                runs += _measure(
                    config, server, setting, "break_even", high, prompts, quick, deadline, log
                )
        except ServerError as err:
            result.notes.append(f"break-even server failed: {str(err).splitlines()[0]}")
        result.break_even = break_even_by_class(runs, setting, config.local.max_num_seqs, boot)
        result.cost = cost_at_load(runs, setting, price_basis(config, local=True))
    result.runs = runs
    add_schedule(result, config.local.max_num_seqs, boot, None)  # the local CPU vLLM serves it
    result.elapsed_s = time.monotonic() - started
    result.load_average = list(os.getloadavg())
    return result
