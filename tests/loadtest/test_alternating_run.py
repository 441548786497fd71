"""Alternating arms as real Locust processes against two scripted servers: the blocks run
one at a time in ABBA order (seen in the records' timestamps), every measured request once
per arm, the warm-up once per arm, the acceptance summed over the blocks, the window without
the other arm's blocks, and a cancel that keeps what was measured."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from itertools import pairwise
from pathlib import Path

import pytest

from bench.scripted_server import Script
from experiment import build_config
from experiment.config import Arm, ExperimentConfig
from loadtest.alternating import block_order
from loadtest.records import RequestRecord, read_records
from loadtest.runner import run_comparison
from loadtest.window import WindowMeta

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
# ~0.3 s per request: 8 chunks of 1 token, 0.03 s apart.
SCRIPT = Script.fixed(8, 1, ttft_s=0.05, gaps_s=0.03)
BLOCK = 4


def _prompts(tmp_path: Path) -> Path:
    lines = [{"id": f"s{i}", "class": "structured", "prompt": f"count to {i}"} for i in range(4)]
    lines += [{"id": f"o{i}", "class": "open_ended", "prompt": f"story {i}"} for i in range(4)]
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


def _overrides(tmp_path: Path) -> dict[str, str]:
    settings = {"max_tokens": 8, "concurrency": 1, "requests_per_prompt": 2, "warmup_requests": 2,
                "max_duration_s": 120, "request_timeout_s": 10, "arms_mode": "alternating",
                "alternating_block_requests": BLOCK}  # fmt: skip
    overrides = {f"loadtest.{key}": str(value) for key, value in settings.items()}
    overrides["loadtest.prompts.files"] = json.dumps([str(_prompts(tmp_path))])
    return overrides


def _config(tmp_path: Path) -> ExperimentConfig:
    return build_config(_overrides(tmp_path))


def _blocks_in_time(out: Path, metas: dict[Arm, WindowMeta]) -> list[tuple[str, int, float, float]]:
    """(arm, block, first start, last end) of every block, from the records alone, by time."""
    found = []
    for arm, meta in metas.items():
        records = [r for r in read_records(out / f"records_{arm.value}.jsonl") if not r.warmup]
        for block in meta.blocks:
            mine = [r for r in records if block.first_index <= r.index <= block.last_index]
            start = min(r.wall_start for r in mine)
            end = max(r.wall_start + (r.e2e_s or 0.0) for r in mine)
            found.append((arm.value, block.block, start, end))
    return sorted(found, key=lambda row: row[2])


def test_blocks_run_in_abba_order_once_each_with_one_warmup(serve, tmp_path) -> None:
    base, sd = serve(SCRIPT), serve(SCRIPT, spec_decode_k=4)
    out = tmp_path / "run"
    summary = run_comparison(_config(tmp_path), base.url, sd.url, out)
    metas = {arm: WindowMeta.read(out / f"window_{arm.value}.json", arm.value) for arm in Arm}
    plan = json.loads((out / "plan_baseline.json").read_text())  # the whole arm's plan
    expected = [item["index"] for item in plan["schedule"] if not item["warmup"]]
    assert len(expected) == 16
    for arm in Arm:
        records = read_records(out / f"records_{arm.value}.jsonl")
        assert sorted(r.index for r in records if not r.warmup) == sorted(expected)  # once each
        assert sum(r.warmup for r in records) == 2  # in the arm's first block only
        assert metas[arm].stopped_by == "schedule_done" and len(metas[arm].blocks) == 4
    # The records' own timestamps: the blocks ran in ABBA order, never two at once.
    in_time = _blocks_in_time(out, metas)
    arms = [arm.value for arm in Arm]
    assert [(arm, block) for arm, block, _, _ in in_time] == [
        (arms[a], b) for a, b in block_order(2, 4)
    ]
    for (_, _, _, end), (_, _, start, _) in pairwise(in_time):
        assert end <= start
    # Pairs: each block holds the same slots on both arms.
    slots = {arm: [(b.first_index, b.last_index) for b in metas[arm].blocks] for arm in Arm}
    assert slots[Arm.BASELINE] == slots[Arm.SPECULATIVE]
    # Acceptance from the speculative blocks' own /metrics movements: one draft of 4 tokens
    # per chunk (1 token: none accepted) for the 16 measured requests, not the 2 warm-ups.
    acceptance = summary.arm(Arm.SPECULATIVE).acceptance
    assert acceptance.drafts == 16 * 8 and acceptance.draft_tokens == 16 * 8 * 4
    # The window is the sum of the arm's blocks, not the span across the other arm's.
    span = max(end for *_, end in in_time) - min(start for _, _, start, _ in in_time)
    for arm in Arm:
        window = summary.arm(arm).window_s
        mine = [end - start for a, _, start, end in in_time if a == arm.value]
        assert window == pytest.approx(sum(mine), rel=1e-6) and window < 0.7 * span
    timing = summary.arms_timing
    assert timing is not None and timing.mode == "alternating"
    assert timing.block_order == [arms[a] for a, _ in block_order(2, 4)]
    assert timing.block_requests == BLOCK
    assert timing.block_overhead_s is not None and timing.block_overhead_s > 0
    report = (out / "report.md").read_text()
    assert "Arms: alternating," in report and "Timing: blocks Base SD SD Base" in report
    assert summary.warnings == [], summary.warnings


def _survivors(marker: str) -> list[str]:
    """Command lines of live processes naming ``marker`` (this test's run directory)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline and int(pid) != os.getpid():
            found.append(cmdline)
    return found


def _measured_in(path: Path) -> int:
    return path.read_text().count('"warmup":false') if path.is_file() else 0


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_cancel_in_a_block_keeps_every_block_and_exits_honestly(
    serve, tmp_path, sig: signal.Signals, code: int
) -> None:
    server = serve(Script(ttft_s=0.05, chunk_tokens=[1] * 10, gaps_s=0.1))  # ~1 s each
    out = tmp_path / f"run-{sig.name}"
    overrides = _overrides(tmp_path)
    args = [arg for key, value in overrides.items() for arg in ("-c", f"{key}={value}")]
    process = subprocess.Popen(
        [sys.executable, "-m", "loadtest", "run", "--baseline", server.url, "--speculative",
         server.url, "--out", str(out), "--no-cloudwatch", *args],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    # Cancel in the speculative arm's first block, after the baseline's first block.
    block = out / "blocks" / "records_speculative_0.jsonl"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and _measured_in(block) < 2:
        time.sleep(0.1)
    os.killpg(process.pid, sig)
    started = time.monotonic()
    output, _ = process.communicate(timeout=60)
    assert time.monotonic() - started < 30, output
    assert process.returncode == code, output
    assert _survivors(str(out)) == []
    summary = json.loads((out / "summary.json").read_text())
    assert summary["cancelled_by"] == sig.name
    arms = summary["arms"]
    # Both arms were cut short: the baseline after its first block, the SD arm within it.
    assert arms["baseline"]["stopped_by"] == arms["speculative"]["stopped_by"] == "cancelled"
    assert arms["baseline"]["overall"]["requests"] == BLOCK
    assert arms["speculative"]["overall"]["requests"] >= 2
    assert arms["baseline"]["not_started_requests"] == 16 - BLOCK
    for arm in ("baseline", "speculative"):
        records: list[RequestRecord] = read_records(out / f"records_{arm}.jsonl")
        measured = [r.index for r in records if not r.warmup]
        assert len(measured) == len(set(measured))  # nothing twice
    assert summary["run"]["arms_mode"] == "alternating"
    assert (out / "report.md").is_file()
    assert summary["warnings"][0].startswith(f"cancelled by {sig.name}")
