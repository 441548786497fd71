"""The embedded default, end to end: models -> both servers -> comparison -> report -> stop.

``run_local`` generates or reuses the tiny model pair, starts the baseline and speculative
vLLM servers (commands rendered by ``runtime/``), runs ``loadtest.run_comparison`` at the
local scale, prints the summary table and the headline (acceptance rate, speedups,
lossless match rate), and writes everything to ``config.local.runs_dir/<timestamp>/``.
The servers are stopped on every path out, including Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiment.config import Arm, ExperimentConfig
from experiment.loading import PROJECT_ROOT
from local_run.arms import arm_servers, write_commands
from local_run.models import ModelPair, ensure_models
from local_run.servers import LocalServers, sigterm_raises
from local_run.smoke import acceptance_by_class, smoke_check, smoke_problems

Log = Callable[[str], None]
SERVER_LOGS = "servers"
LOCAL_RUN_JSON = "local_run.json"
LOCAL_RUN_MD = "local_run.md"


@dataclass
class LocalRunResult:
    run_dir: Path
    ok: bool
    headline: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def runs_root(config: ExperimentConfig) -> Path:
    path = Path(config.local.runs_dir)
    return path if path.is_absolute() else PROJECT_ROOT / path


def new_run_dir(config: ExperimentConfig) -> Path:
    root = runs_root(config)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_dir = root / stamp
    suffix = 1
    while run_dir.exists():  # two runs within a second
        run_dir = root / f"{stamp}-{suffix}"
        suffix += 1
    run_dir.mkdir(parents=True)
    return run_dir


def headline(summary_data: dict[str, Any]) -> dict[str, Any]:
    """The numbers the issue asks the report to state, pulled from summary.json."""
    speedup = (summary_data.get("speedup") or {}).get("overall") or {}
    acceptance = summary_data["arms"]["speculative"].get("acceptance") or {}
    lossless = summary_data.get("lossless") or {}
    by_class = {}
    for name, block in ((summary_data.get("speedup") or {}).get("by_class") or {}).items():
        by_class[name] = {
            "e2e_mean": (block.get("e2e_ms") or {}).get("mean"),
            "tpot_mean": (block.get("tpot_ms") or {}).get("mean"),
        }
    return {
        "acceptance_rate": acceptance.get("acceptance_rate"),
        "mean_acceptance_length": acceptance.get("mean_acceptance_length"),
        "acceptance_note": acceptance.get("reason"),
        "speedup_e2e_mean": (speedup.get("e2e_ms") or {}).get("mean"),
        "speedup_tpot_mean": (speedup.get("tpot_ms") or {}).get("mean"),
        "speedup_ttft_mean": (speedup.get("ttft_ms") or {}).get("mean"),
        "speedup_output_throughput": speedup.get("output_throughput_tok_s"),
        "speedup_by_class": by_class,
        "lossless_exact_match_rate": lossless.get("exact_match_rate"),
        "lossless_prompts_compared": lossless.get("prompts_compared"),
    }


def _fmt(value: Any, pattern: str) -> str:
    return "n/a" if value is None else pattern.format(value)


def headline_text(numbers: dict[str, Any]) -> str:
    lines = [
        f"acceptance rate: {_fmt(numbers['acceptance_rate'], '{:.1%}')} "
        f"(mean acceptance length {_fmt(numbers['mean_acceptance_length'], '{:.2f}')} "
        "tokens per target step)",
    ]
    for name, rate in sorted((numbers.get("acceptance_by_class") or {}).items()):
        lines.append(f"  {name} prompts, one at a time: {_fmt(rate, '{:.1%}')}")
    lines += [
        f"speedup SD vs baseline (>1 = SD faster): E2E mean "
        f"{_fmt(numbers['speedup_e2e_mean'], '{:.2f}x')}, TPOT mean "
        f"{_fmt(numbers['speedup_tpot_mean'], '{:.2f}x')}, output throughput "
        f"{_fmt(numbers['speedup_output_throughput'], '{:.2f}x')}",
    ]
    for name, block in sorted(numbers["speedup_by_class"].items()):
        lines.append(
            f"  {name} prompts: E2E mean {_fmt(block['e2e_mean'], '{:.2f}x')}, "
            f"TPOT mean {_fmt(block['tpot_mean'], '{:.2f}x')}"
        )
    lines.append(
        f"lossless exact-match rate (greedy SD output == baseline output): "
        f"{_fmt(numbers['lossless_exact_match_rate'], '{:.0%}')} of "
        f"{numbers['lossless_prompts_compared']} prompts"
    )
    return "\n".join(lines)


def _problems(summary_data: dict[str, Any]) -> list[str]:
    problems = []
    for arm in Arm:
        overall = summary_data["arms"][arm.value]["overall"]
        if overall["failed"] or overall["succeeded"] != overall["requests"]:
            problems.append(
                f"{arm.value}: {overall['succeeded']} of {overall['requests']} requests "
                f"succeeded ({overall['failures_by_reason']})"
            )
    return problems


def _write_local_report(
    run_dir: Path,
    pair: ModelPair,
    servers: LocalServers,
    timings: dict[str, float],
    numbers: dict[str, Any],
    table: str,
    problems: list[str],
) -> None:
    data = {
        "headline": numbers,
        "problems": problems,
        "timings_s": {k: round(v, 1) for k, v in timings.items()},
        "server_ready_after_s": {s.name: s.ready_after_s for s in servers.servers},
        "models": {"path": str(pair.root), **pair.manifest},
    }
    (run_dir / LOCAL_RUN_JSON).write_text(json.dumps(data, indent=1))
    evaluation = pair.manifest.get("evaluation", {})
    offline = ", ".join(
        f"{kind} {block['greedy_agreement']:.0%}" for kind, block in sorted(evaluation.items())
    )
    text = [
        "# Local run: baseline vs speculative decoding on vLLM (CPU)",
        "",
        "Tiny generated Qwen3-architecture models (not Qwen3-32B): the numbers show the",
        "pipeline works end to end; they say nothing about trn2 performance.",
        "",
        "## Headline",
        "",
        *(f"- {line.strip()}" for line in headline_text(numbers).splitlines()),
        "",
        "## Summary",
        "",
        "```",
        table,
        "```",
        "",
        "Full load-test report: [report.md](report.md). Server logs: `servers/`. Exact "
        "commands: `commands.json`.",
        "",
        "## Models and timings",
        "",
        f"- models: `{pair.root}`; parameters {pair.manifest.get('parameter_counts')}; offline "
        f"draft/target greedy agreement {offline}",
        "- timings (s): " + ", ".join(f"{k} {v:.0f}" for k, v in timings.items()),
    ]
    if problems:
        text += ["", "## Problems", "", *(f"- {p}" for p in problems)]
    (run_dir / LOCAL_RUN_MD).write_text("\n".join(text) + "\n")


def run_local(
    config: ExperimentConfig, *, smoke_only: bool = False, log: Log = print
) -> LocalRunResult:
    from loadtest import Overrides, render_summary_table, run_comparison

    started = time.monotonic()
    timings: dict[str, float] = {}
    pair = ensure_models(config.local, log=log)
    timings["models"] = time.monotonic() - started
    run_dir = new_run_dir(config)
    log(f"local run: writing to {run_dir}")
    servers = arm_servers(config, pair, run_dir / SERVER_LOGS)
    write_commands(servers, run_dir / "commands.json")
    with sigterm_raises(), LocalServers(servers, config.local.startup_timeout_s, log) as running:
        timings["server_startup"] = running.startup_seconds or 0.0
        urls = {Arm(s.name): s.url for s in running.servers}
        if smoke_only:
            checks = smoke_check(config, urls)
            result = {arm.value: check.to_dict() for arm, check in checks.items()}
            (run_dir / "smoke.json").write_text(json.dumps(result, indent=1))
            problems = smoke_problems(checks)
            for arm, check in checks.items():
                log(
                    f"smoke {arm.value}: {check.record.output_tokens} tokens in "
                    f"{len(check.record.chunk_tokens)} chunks: {check.record.text[:80]!r}"
                )
            for problem in problems:
                log(f"smoke problem: {problem}")
            return LocalRunResult(run_dir, not problems, problems=problems)
        loadtest_started = time.monotonic()
        summary = run_comparison(
            config,
            urls[Arm.BASELINE],
            urls[Arm.SPECULATIVE],
            run_dir,
            overrides=Overrides.local_scale(config),
        )
        timings["load_test"] = time.monotonic() - loadtest_started
        # Outside the measured window: the overall counters cannot tell classes apart.
        per_class = acceptance_by_class(config, urls[Arm.SPECULATIVE])
    timings["total"] = time.monotonic() - started
    table = render_summary_table(summary)
    numbers = headline(summary.data)
    numbers["acceptance_by_class"] = {
        name: block.get("acceptance_rate") for name, block in per_class.items()
    }
    problems = _problems(summary.data)
    _write_local_report(run_dir, pair, running, timings, numbers, table, problems)
    log("")
    log(table)
    log("")
    log(headline_text(numbers))
    for warning in summary.data.get("warnings", []):
        log(f"warning: {warning}")
    for problem in problems:
        log(f"problem: {problem}")
    log(
        f"report: {run_dir / LOCAL_RUN_MD} and {run_dir / 'report.md'} "
        f"({timings['total']:.0f}s in total)"
    )
    return LocalRunResult(run_dir, not problems, numbers, problems)
