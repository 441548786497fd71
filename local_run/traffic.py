"""A small mixed trace for the local run (``local.traffic``): what a platform team's request
log looks like, made from the local prompt suite, so ``make local`` can exercise the import,
the replay and the per-class x length-bucket verdict end to end.

The log is written in the format ``python -m loadtest traffic import`` reads (OpenAI chat
completions requests, the class in ``routing.class_header``) and imported like any other:

- both classes of the suite, alternating, so every class meets every length bucket;
- short contexts (one user turn) and long multi-turn ones (a system message, two earlier
  exchanges with the assistant's replies, then the prompt), long enough to cross the first
  edge of ``local.traffic_length_buckets`` and within ``local.max_model_len`` with the output;
- output lengths that differ per request, up to ``local.max_tokens``;
- bursts: requests arrive in groups at one instant, groups seconds apart.

Deterministic: a function of the suite and the configuration, no randomness.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from experiment.config import ExperimentConfig
from loadtest.prompts import Prompt, load_prompts
from local_run.arms import local_experiment

TRACE_REQUESTS = 32
START_UNIX_S = 1_800_000_000.0
# Group sizes, repeated: bursts of up to the servers' batch, separated by quiet seconds.
BURST_SIZES = (1, 3, 2, 4)
BURST_GAP_S = 4.0
WITHIN_BURST_S = 0.02
# Fractions of local.max_tokens the outputs cycle through.
OUTPUT_SHARES = (0.25, 1.0, 0.5, 0.75)
SYSTEM = "You are a helpful assistant. Follow the format the user asks for exactly."
REPLIES = {
    "structured": "\n".join(str(n) for n in range(1, 25)),
    "open_ended": "Here is a short answer in plain prose, as you asked, with no list.",
}


def _conversation(prompt: Prompt, earlier: list[Prompt], long: bool) -> list[dict[str, str]]:
    if not long:
        return [{"role": "user", "content": prompt.text}]
    messages = [{"role": "system", "content": SYSTEM}]
    for previous in earlier:
        messages.append({"role": "user", "content": previous.text})
        reply = REPLIES.get(previous.prompt_class, REPLIES["open_ended"])
        messages.append({"role": "assistant", "content": reply})
    messages.append({"role": "user", "content": prompt.text})
    return messages


def trace_log(config: ExperimentConfig) -> list[dict[str, Any]]:
    """The trace's request log lines (OpenAI chat-completions requests with their usage)."""
    suite = load_prompts(list(local_experiment(config).loadtest.prompts.files))
    by_class: dict[str, list[Prompt]] = defaultdict(list)
    for prompt in suite:
        by_class[prompt.prompt_class].append(prompt)
    classes = sorted(by_class)
    header = config.routing.class_header
    lines: list[dict[str, Any]] = []
    clock = 0.0
    burst, in_burst = 0, 0
    for number in range(TRACE_REQUESTS):
        name = classes[number % len(classes)]
        members = by_class[name]
        turn = number // len(classes)
        prompt = members[turn % len(members)]
        long = (turn // 2) % 2 == 1  # short, short, long, long, ... in each class
        earlier = [members[(turn + k) % len(members)] for k in (1, 2)]
        share = OUTPUT_SHARES[(number // 3) % len(OUTPUT_SHARES)]
        lines.append(
            {
                "id": f"local-trace-{number:03d}",
                "timestamp": round(START_UNIX_S + clock + in_burst * WITHIN_BURST_S, 3),
                "headers": {header: name},
                "model": config.serving.target_model,
                "messages": _conversation(prompt, earlier, long),
                "usage": {"completion_tokens": max(1, int(config.local.max_tokens * share))},
            }
        )
        in_burst += 1
        if in_burst == BURST_SIZES[burst % len(BURST_SIZES)]:
            burst, in_burst = burst + 1, 0
            clock += BURST_GAP_S
    return lines


def write_trace_log(config: ExperimentConfig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in trace_log(config)))
    return path


TRACE_LOG = "traffic_log.jsonl"
TRACE_FILE = "traffic.jsonl"


def import_trace(config: ExperimentConfig, run_dir: Path, tokenizer_dir: Path | None) -> Path:
    """The trace's log and traffic file in ``run_dir``, input tokens counted with the served
    tokenizer (``tokenizer_dir``; None: the importer's approximation). The generated trace
    imports whole: a line it refuses is a fault of this module, not of the user's log."""
    from loadtest.traffic import (
        ImportSettings,
        import_log,
        profile,
        tokenizer_counter,
        write_traffic,
    )

    log = write_trace_log(config, run_dir / TRACE_LOG)
    settings = ImportSettings(
        allowed_classes=list(config.routing.allowed_classes),
        max_model_len=config.local.max_model_len,
        length_buckets=config.local.traffic_length_buckets,
        class_field=f"headers.{config.routing.class_header}",
        count_tokens=tokenizer_counter(tokenizer_dir) if tokenizer_dir is not None else None,
    )
    result = import_log(log, settings)
    if result.rejected:
        raise ValueError(
            "the generated local trace does not import whole:\n"
            + profile(
                result,
                approximate=tokenizer_dir is None,
                length_buckets=config.local.traffic_length_buckets,
            )
        )
    return write_traffic(result.requests, run_dir / TRACE_FILE)


def replay_config(config: ExperimentConfig, traffic_file: Path) -> ExperimentConfig:
    """The local run's load (``local_scale``'d ``config``) replaying ``traffic_file``: as many
    users as a server batches (``local.max_num_seqs``), so a burst is sent as recorded."""
    loadtest = config.loadtest
    traffic = loadtest.traffic.model_copy(
        update={
            "file": str(traffic_file),
            "length_buckets": list(config.local.traffic_length_buckets),
        }
    )
    update: dict[str, Any] = {
        "traffic": traffic,
        "concurrency": max(loadtest.concurrency, config.local.max_num_seqs),
    }
    # Alternating blocks must fill the users (LoadTestConfig's rule).
    update["alternating_block_requests"] = max(
        loadtest.alternating_block_requests, update["concurrency"]
    )
    return config.model_copy(update={"loadtest": loadtest.model_copy(update=update)})
