"""The tiered arm end to end without vLLM: ``python -m loadtest run --tiered`` drives the real
Envoy gateway (rendered from ``routing``) in front of two scripted servers (ground truth).

What the scripted servers saw is the proof: every request of every arm carried its class
header, the gateway sent exactly the speculative classes to the speculative server, and the
tiered arm ran after the two serving arms; the summary holds the third arm and its per-class
comparison. In either arms mode; about 20 s each on the shared 2-core machine.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from gateway_harness import (
    ROOT,
    gateway_between,
    loadtest_env,
    tiered_run_command,
    write_prompts,
)

from bench.scripted_server import Script, ScriptedServer
from experiment import build_config
from local_run.gateway import Address

pytestmark = [pytest.mark.integration, pytest.mark.process, pytest.mark.timeout(300)]
TOKENS = 24
REPEATS = 3  # 4 prompts per class x 3: 12 pairs per class, enough for the check
BASE = Script.fixed(TOKENS, 1, ttft_s=0.04, gaps_s=0.008)
SD = Script.fixed(TOKENS, 4, ttft_s=0.03, gaps_s=0.010)


@pytest.mark.parametrize("mode", ["sequential", "concurrent"])
def test_the_gateway_is_driven_as_a_third_arm_with_class_headers(tmp_path: Path, mode) -> None:
    routing = build_config({}).routing
    out = tmp_path / "run"
    with ScriptedServer(BASE) as base, ScriptedServer(SD, spec_decode_k=7) as sd:
        servers = Address.of_url(base.url), Address.of_url(sd.url)
        with gateway_between(routing, *servers, tmp_path / "gateway") as gateway:
            settings = {
                "prompts.files": [str(write_prompts(tmp_path))],
                "max_tokens": TOKENS,
                "concurrency": 2,
                "requests_per_prompt": REPEATS,
                "warmup_requests": 1,
                "arms_mode": mode,
                "max_duration_s": 120,
            }
            result = subprocess.run(
                tiered_run_command(base.url, sd.url, gateway.url, out, settings),
                cwd=ROOT,
                env=loadtest_env(),
                capture_output=True,
                text=True,
                timeout=240,
                check=False,
            )
        base_log, sd_log = list(base.log), list(sd.log)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    measured = 8 * REPEATS
    for arm in ("baseline", "speculative", "tiered"):
        overall = summary["arms"][arm]["overall"]
        assert overall["requests"] == overall["succeeded"] == measured, arm
    assert summary["arms"]["tiered"]["label"] == "Tiered"
    assert summary["run"]["arms_mode"] == mode
    # Every request of every arm carried its class; the arms' requests are identical.
    for entry in [*base_log, *sd_log]:
        prompt = json.dumps(entry.body["messages"])
        expected = "structured" if "count to" in prompt else "open_ended"
        assert entry.headers.get(routing.class_header) == expected
    # Each server got its own arm's requests (measured + 1 warm-up), plus from the gateway:
    # the speculative server exactly the tiered arm's structured ones.
    tiered_records = [
        json.loads(line) for line in (out / "records_tiered.jsonl").read_text().splitlines()
    ]
    tiered_structured = sum(1 for r in tiered_records if r["prompt_class"] == "structured")
    assert len(sd_log) == measured + 1 + tiered_structured
    assert len(base_log) == measured + 1 + len(tiered_records) - tiered_structured
    # The tiered arm ran after both serving arms: its requests are the last ones each saw.
    arm_end = max(entry.received for entry in sd_log[: measured + 1])
    assert all(entry.received > arm_end for entry in sd_log[measured + 1 :])
    tiered = summary["tiered"]
    assert tiered["routing"]["speculative_classes"] == routing.speculative_classes
    assert tiered["lossless"]["exact_match_rate"] == 1.0
    structured, open_ended = tiered["by_class"]["structured"], tiered["by_class"]["open_ended"]
    assert structured["routed_to"] == "speculative" and open_ended["routed_to"] == "baseline"
    assert structured["vs_baseline"]["n"] == open_ended["vs_baseline"]["n"] == 4 * REPEATS
    assert structured["vs_baseline"]["estimate"] > 1.5  # SD's scripted speed, through Envoy
    assert open_ended["vs_speculative"]["estimate"] < 1.0  # the baseline's, slower than SD
    assert structured["held"] is not None and open_ended["held"] is not None
    assert "Tiered arm: per class vs baseline and SD" in (out / "report.md").read_text()
