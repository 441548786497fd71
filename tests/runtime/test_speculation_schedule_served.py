"""Integration tier: a speculation schedule served by real vLLM (CPU) with the local pair.

One speculative server started exactly as the local run starts its arm (rendered from the
config, through local_run's launcher) with serving.speculation_schedule [[1,1,0],[2,4,3]]:
one request at a time it drafts nothing (the drafts counter stays put while tokens stream),
two at a time it drafts, so vLLM applies the schedule rather than ignoring it. "Two at a time"
is made certain, not hoped for: a long streamed request is under way before the second is
sent, and the test checks it was still streaming after the second finished. Counters are read
once vLLM has counted every finished request, so the reading never depends on when the API
server records a step's statistics against when it answers. A schedule vLLM
refuses at start (rendered past runtime/validate.py, which would refuse it first) fails the
start with vLLM's own message in the error."""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
import time
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from experiment import build_config
from experiment.config import Arm, ExperimentConfig
from guardrails import vllm_metrics
from loadtest.acceptance import DRAFTS, scrape
from local_run.models import ModelPair, ensure_models
from local_run.servers import LocalServers, Server, ServerError, free_port, sigterm_raises
from runtime.render import RENDERERS, VllmCommand, render
from runtime.spec import Generation

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

SCHEDULE = "[[1,1,0],[2,4,3]]"  # no drafts alone, k=3 from two requests on
MAX_TOKENS = 24
LONG_TOKENS = 200  # the streamed request that the second one overlaps
SETTLE_TIMEOUT_S = 30.0
PROMPT = "Count from one to twenty: one, two, three,"


@pytest.fixture(scope="module")
def config() -> ExperimentConfig:
    return build_config(
        {
            "experiment.local.speculative_port": free_port(),
            "experiment.local.num_speculative_tokens": 3,
            "experiment.serving.speculation_schedule": SCHEDULE,
        }
    )


@pytest.fixture(scope="module")
def pair(config: ExperimentConfig) -> ModelPair:
    return ensure_models(config.local)  # the cached pair of `make local`


def server(config: ExperimentConfig, command: VllmCommand, log_dir: Path) -> Server:
    return Server(
        name="speculative",
        command=command,
        host=config.local.host,
        port=config.local.speculative_port,
        served_model_name=config.serving.target_model,
        log_path=log_dir / "speculative.log",
        python=sys.executable,
    )


def complete(url: str, model: str) -> int:
    body = {"model": model, "prompt": PROMPT, "max_tokens": MAX_TOKENS, "temperature": 0}
    response = requests.post(f"{url}/v1/completions", json=body, timeout=300)
    response.raise_for_status()
    return int(response.json()["usage"]["completion_tokens"])


def drafts(url: str) -> float:
    counters = scrape(url)
    assert counters is not None, "no /metrics"
    return float(counters.get(DRAFTS, 0.0))


def finished(url: str) -> float:
    """vLLM's count of finished requests (every finish reason, summed)."""
    text = requests.get(f"{url}/metrics", timeout=10).text
    name = vllm_metrics.REQUEST_SUCCESS + vllm_metrics.COUNTER_SUFFIX
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    )


def drafts_once_counted(url: str, requests_done: int) -> float:
    """The drafts counter once vLLM has recorded ``requests_done`` finished requests (vLLM
    records a step's statistics in the pass that hands out its outputs, except for steps of
    more than VLLM_V1_OUTPUT_PROC_CHUNK_SIZE outputs; the count makes the order moot)."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while finished(url) < requests_done:
        assert time.monotonic() < deadline, f"vLLM never counted {requests_done} requests"
        time.sleep(0.1)
    return drafts(url)


class LongStream:
    """A streamed completion of LONG_TOKENS tokens (EOS ignored), read in a thread, that
    says when its first token arrived and how many tokens came after a given moment."""

    def __init__(self, url: str, model: str) -> None:
        self.first_token = threading.Event()
        self.arrivals: list[float] = []
        body = {
            "model": model,
            "prompt": PROMPT,
            "max_tokens": LONG_TOKENS,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
        }
        self._response = requests.post(f"{url}/v1/completions", json=body, stream=True, timeout=300)
        self._response.raise_for_status()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self._response.iter_lines():
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            if json.loads(line[len(b"data: ") :])["choices"][0]["text"]:
                self.arrivals.append(time.monotonic())
                self.first_token.set()

    def join(self) -> None:
        self._thread.join(timeout=300)
        assert not self._thread.is_alive(), "the long stream never ended"


def test_vllm_serves_the_schedule_drafting_only_where_it_says(
    config: ExperimentConfig, pair: ModelPair, tmp_path: Path
) -> None:
    spec = config.local_serving_spec(Arm.SPECULATIVE, str(pair.target_dir), str(pair.draft_dir))
    command = render(spec)
    assert '"num_speculative_tokens_per_batch_size":[[1,1,0],[2,4,3]]' in " ".join(command.args)
    model = config.serving.target_model
    with (
        sigterm_raises(),
        LocalServers(
            [server(config, command, tmp_path)], config.local.startup_timeout_s, print
        ) as running,
    ):
        url = running.servers[0].url
        before = drafts(url)
        assert complete(url, model) == MAX_TOKENS  # alone: batch size 1, k=0
        alone = drafts_once_counted(url, 1)
        long = LongStream(url, model)
        assert long.first_token.wait(timeout=300), "the long stream sent no token"
        assert complete(url, model) == MAX_TOKENS  # beside the long stream: batch size 2
        second_done = time.monotonic()
        long.join()
        together = drafts_once_counted(url, 3)
    assert alone == before, "vLLM drafted at batch size 1, where the schedule says k=0"
    after_second = sum(arrival > second_done for arrival in long.arrivals)
    assert after_second > 0, "the long stream had ended before the second request finished"
    assert together > alone, "vLLM never drafted at batch size 2, where the schedule says k=3"


def test_a_schedule_vllm_refuses_fails_the_start_with_vllms_message(
    config: ExperimentConfig, pair: ModelPair, tmp_path: Path
) -> None:
    spec = config.local_serving_spec(Arm.SPECULATIVE, str(pair.target_dir), str(pair.draft_dir))
    # Not starting at 1: runtime/validate.py refuses it before any start; rendered without
    # that check, vLLM's scheduler refuses it (vllm/v1/spec_decode/dynamic/utils.py).
    command = RENDERERS[Generation.LOCAL_CPU](
        dataclasses.replace(spec, speculation_schedule=((2, 4, 3),))
    )
    with (
        pytest.raises(ServerError) as error,
        LocalServers([server(config, command, tmp_path)], config.local.startup_timeout_s, print),
    ):
        pass
    message = str(error.value)
    assert "vLLM exited with code" in message
    assert "The first batch-size range must start at 1" in message
