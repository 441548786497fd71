"""The calibration before the load (loadtest.expected.calibrate) against two scripted servers
whose step costs and tokens per step are known by construction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.scripted_server import Script, ScriptedServer
from experiment.config import Arm
from loadtest.client import RequestParams
from loadtest.expected import CALIBRATION_PROMPTS, calibrate_suite, predicted_speedup

pytestmark = pytest.mark.process

K = 4
# Baseline: a token every 20 ms after a 50 ms first token. Speculative: a 30 ms step carrying
# 2 or 3 tokens after a 60 ms first token (the server's counters: a chunk of n tokens is one
# step that accepted n - 1; 11 tokens in 5 steps, tau = 2.2).
BASELINE = Script(ttft_s=0.05, chunk_tokens=[1] * 11, gaps_s=0.02)
SPECULATIVE = Script(ttft_s=0.06, chunk_tokens=[1, 2, 3, 2, 3], gaps_s=0.03)


def _prompts(tmp_path: Path) -> str:
    lines = [{"id": f"s{i}", "class": "structured", "prompt": f"count to {i}"} for i in range(4)]
    lines += [{"id": f"o{i}", "class": "open_ended", "prompt": f"story {i}"} for i in range(3)]
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return str(path)


def test_each_class_is_calibrated_on_both_arms_before_the_load(tmp_path: Path) -> None:
    params = RequestParams(model="m", max_tokens=11, timeout_s=5.0)
    with (
        ScriptedServer(BASELINE) as baseline,
        ScriptedServer(SPECULATIVE, spec_decode_k=K) as speculative,
    ):
        urls = {Arm.BASELINE: baseline.url, Arm.SPECULATIVE: speculative.url}
        costs = calibrate_suite([_prompts(tmp_path)], urls, params)
        served = speculative.spec_decode_truth()
    assert sorted(costs) == ["open_ended", "structured"]
    for block in costs.values():
        assert block.baseline_step_ms == pytest.approx(20.0, rel=0.25)
        assert block.speculative_step_ms == pytest.approx(30.0, rel=0.25)
        assert block.tokens_per_step == pytest.approx(11 / 5)
        assert block.output_tokens == 11
        # E2E_base = 50 + 10 x 20 = 250 ms; E2E_SD = 60 + 10 x 30 / 2.2 = 196 ms
        assert predicted_speedup(block) == pytest.approx(250 / 196.4, rel=0.2)
    # Two prompts per class and one warm-up request reached the speculative server, 5 steps
    # each.
    assert served["drafts"] == 5 * (2 * CALIBRATION_PROMPTS + 1)


def test_a_server_without_counters_gives_no_prediction(tmp_path: Path) -> None:
    params = RequestParams(model="m", max_tokens=11, timeout_s=5.0)
    with ScriptedServer(BASELINE) as baseline, ScriptedServer(SPECULATIVE) as speculative:
        urls = {Arm.BASELINE: baseline.url, Arm.SPECULATIVE: speculative.url}
        assert calibrate_suite([_prompts(tmp_path)], urls, params) == {}
