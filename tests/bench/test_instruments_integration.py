"""Every instrument against the real truth-server process, end to end (small, ~45 s; the
first AIPerf run also installs its venv, minutes).

Asserts the wiring (matching, token counts, no failures), not timing: the machine is shared.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.accuracy import Truth, compute_errors, summarize_errors
from bench.aiperf_instrument import run_aiperf
from bench.instruments import run_locust, run_vllm_bench
from bench.tokenizer import build_tokenizer
from bench.truth_server import TruthServer
from bench.workload import Workload

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]  # vLLM's import: 14 s idle

WORKLOAD = Workload(
    ttft_s=0.01,
    gap_s=0.005,
    chunk_tokens=(1, 3, 2, 4),
    warmup_requests=1,
    levels=(2,),
    requests={2: 6},
)


@pytest.mark.parametrize("instrument", ["locust", "requests", "fasthttp", "vllm", "aiperf"])
def test_instrument_is_matched_to_ground_truth(instrument: str, tmp_path: Path) -> None:
    with TruthServer(WORKLOAD, tmp_path / "server.log") as server:
        if instrument == "locust":
            observations, _ = run_locust(WORKLOAD, 2, server.url, tmp_path / "run", processes=2)
        elif instrument in ("requests", "fasthttp"):
            observations, _ = run_locust(
                WORKLOAD, 2, server.url, tmp_path / "run", transport=instrument
            )
        elif instrument == "aiperf":
            tokenizer = build_tokenizer(tmp_path / "tokenizer")
            observations, meta = run_aiperf(WORKLOAD, 2, server.url, tmp_path / "run", tokenizer)
            assert meta["returncode"] == 0
        else:
            tokenizer = build_tokenizer(tmp_path / "tokenizer")
            observations, _ = run_vllm_bench(WORKLOAD, 2, server.url, tmp_path / "run", tokenizer)
        truths = [Truth.from_log(entry) for entry in server.log()]
    errors = compute_errors(observations, truths)
    # One warm-up for the whole arm: with 2 workers only worker 0 runs it.
    assert len(truths) == 6 + WORKLOAD.warmup_requests
    assert (errors.matched, errors.failed, errors.untagged, errors.unaligned_chunks) == (6, 0, 0, 0)
    assert errors.token_count == [0] * 6
    assert len(errors.chunk_gap_ms) == 6 * 3
    assert len(errors.itl_token_ms) == 6 * (3 + 2 + 4)
    # Arrivals cannot precede sends by more than the server's own recording slack.
    assert min(errors.ttft_ms) > -5.0
    # Only our harness reports tokens per chunk; AIPerf one ITL per request.
    reported = summarize_errors(errors)["reported"]
    assert reported["chunk_times"] == len(WORKLOAD.chunk_tokens)
    assert reported["chunk_tokens"] is (instrument in ("locust", "requests", "fasthttp"))
    assert reported["itl_values"] == (1 if instrument == "aiperf" else 3)
