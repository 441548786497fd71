"""The local run's generated trace: mixed (classes, turns, lengths, bursts), imported whole
within local.max_model_len, and replayed only when local.traffic is set."""

from __future__ import annotations

import stat
from collections import Counter
from pathlib import Path

import pytest

from experiment import build_config
from experiment.config import Arm
from loadtest.plan import build_plan, local_scale
from loadtest.traffic import bucket_label, per_second, read_traffic
from local_run.models import ensure_models
from local_run.traffic import import_trace, replay_config, trace_log


def test_the_trace_mixes_classes_turns_lengths_and_bursts():
    config = build_config({})
    lines = trace_log(config)
    assert len({line["id"] for line in lines}) == len(lines) == 32
    classes = Counter(line["headers"][config.routing.class_header] for line in lines)
    assert set(classes) == {"structured", "open_ended"} and len(set(classes.values())) == 1
    turns = Counter(sum(m["role"] == "user" for m in line["messages"]) for line in lines)
    assert turns[1] and turns[3]  # single-turn and multi-turn conversations
    outputs = {line["usage"]["completion_tokens"] for line in lines}
    assert len(outputs) > 2 and max(outputs) == config.local.max_tokens
    stamps = Counter(int(line["timestamp"]) for line in lines)
    assert max(stamps.values()) >= 3  # a burst: several requests in one second


def check_trace_imported_whole(tmp_path: Path, tokenizer: Path | None) -> None:
    config = build_config({})
    path = import_trace(config, tmp_path, tokenizer)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    requests = read_traffic(path)
    assert len(requests) == 32
    edges = config.local.traffic_length_buckets
    cells = Counter((r.prompt_class, bucket_label(r.input_tokens, edges)) for r in requests)
    assert set(cells) == {(c, b) for c in ("structured", "open_ended") for b in ("0-127", "128+")}
    assert max(r.input_tokens + r.output_tokens for r in requests) <= config.local.max_model_len
    assert max(per_second(requests)) >= 3


def test_the_trace_imports_whole_with_both_buckets_in_each_class(tmp_path: Path):
    check_trace_imported_whole(tmp_path, None)  # lengths by this module's approximation


@pytest.mark.train
@pytest.mark.timeout(600)  # generates the tiny pair on a fresh clone
def test_the_trace_imports_whole_counted_by_the_served_tokenizer(tmp_path: Path):
    """Counted by the generated target's own tokenizer (never skipped: the pair is made if
    this clone has none yet, as `make local` makes it)."""
    pair = ensure_models(build_config({}).local)
    check_trace_imported_whole(tmp_path, pair.target_dir)


def test_local_traffic_replays_the_trace_and_is_off_by_default(tmp_path: Path):
    default = build_config({})
    assert default.local.traffic is False and default.loadtest.traffic.file is None
    config = build_config({"local.traffic": "true"})
    load = replay_config(local_scale(config), import_trace(config, tmp_path, None))
    assert load.loadtest.concurrency == config.local.max_num_seqs
    plan = build_plan(
        load, Arm.BASELINE, "http://127.0.0.1:1", tmp_path,
        max_model_len=config.local.max_model_len,
    )  # fmt: skip
    measured = plan.measured
    assert len(measured) == 32
    assert all(item.arrival_s is not None and item.prompt.messages for item in measured)
    assert all(item.prompt.max_tokens for item in measured)
    # The trn2 serving length would accept it too; a shorter one refuses, naming requests.
    with pytest.raises(ValueError, match=r"do not fit max_model_len 64.*local-trace-"):
        build_plan(load, Arm.BASELINE, "http://127.0.0.1:1", tmp_path, max_model_len=64)
