"""The guardrail probe (loadtest/guardrail_probe.py, ``python -m loadtest probe``) against a
scripted gateway, pushing to a recording HTTP server that answers as a Pushgateway does."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from bench.scripted_server import Fault, Script, ScriptedServer, SentLog
from experiment.config import Arm, ExperimentConfig
from guardrails.rules import (
    PROBE_ACCEPTANCE,
    PROBE_AGREEMENT,
    PROBE_LAST_SUCCESS,
    PROBE_TOKEN_TIME,
    jobs,
)
from loadtest.__main__ import main
from loadtest.analysis import served_k
from loadtest.guardrail_probe import DEADLINE, ProbeRun, registry_of, run_probe

pytestmark = [pytest.mark.process, pytest.mark.timeout(60)]

TOKENS = 16
BASELINE = Script.fixed(TOKENS, 1, gaps_s=0.0, ttft_s=0.0)  # one token per step
# Three tokens a chunk after the first: 2 of k drafts accepted per step.
SPECULATIVE = Script(chunk_tokens=[1, 3, 3, 3, 3, 3], gaps_s=0.0, ttft_s=0.0)
LOSSY = Script(chunk_tokens=[1, 3, 3, 3, 3, 3], gaps_s=0.0, ttft_s=0.0, divergence_token=8)
FAILING = Script(fault=Fault.HTTP_ERROR, http_status=503)
CLASSES = ("structured", "open_ended")


class ScriptedGateway(ScriptedServer):
    """The gateway and its two arms in one: a request with the class header gets the
    speculative arm's script, every other request the baseline's (the default route)."""

    def __init__(self, speculative: Script, baseline: Script, header: str) -> None:
        super().__init__(baseline, precise_pacing=False)
        self.speculative = speculative
        self.header = header

    def begin(
        self,
        path: str,
        body: dict[str, Any],
        received: float,
        headers: dict[str, str] | None = None,
    ) -> tuple[SentLog, Script]:
        entry, script = super().begin(path, body, received, headers)
        return entry, self.speculative if self.header in (headers or {}) else script


class RecordingPushgateway:
    """Records each push (method, path, body) and answers 200, as a Pushgateway does."""

    def __init__(self) -> None:
        pushes: list[tuple[str, str, str]] = []
        self.pushes = pushes

        class Handler(BaseHTTPRequestHandler):
            def _record(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                pushes.append((self.command, self.path, self.rfile.read(length).decode()))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_PUT = do_POST = _record  # http.server's naming

            def log_message(self, *_: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> RecordingPushgateway:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def pushgateway() -> Iterator[RecordingPushgateway]:
    with RecordingPushgateway() as server:
        yield server


def _prompts(tmp_path: Path) -> Path:
    lines = [{"id": f"s{i}", "class": "structured", "prompt": f"count to {i}"} for i in range(5)]
    lines += [{"id": f"o{i}", "class": "open_ended", "prompt": f"story {i}"} for i in range(5)]
    lines += [{"id": "x0", "class": "other", "prompt": "not probed"}]
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


def _settings(tmp_path: Path, per_class: int = 3) -> list[str]:
    return [
        f"loadtest.prompts.files={json.dumps([str(_prompts(tmp_path))])}",
        f"routing.speculative_classes={json.dumps(list(CLASSES))}",
        f"guardrails.probe.prompts_per_class={per_class}",
        f"guardrails.probe.max_tokens={TOKENS}",
    ]


def _config(tmp_path: Path, per_class: int = 3) -> ExperimentConfig:
    return ExperimentConfig.model_validate(
        {
            "loadtest": {"prompts": {"files": [str(_prompts(tmp_path))]}},
            "routing": {"speculative_classes": list(CLASSES)},
            "guardrails": {"probe": {"prompts_per_class": per_class, "max_tokens": TOKENS}},
        }
    )


def _probe(gateway: str, pushgateway: str, tmp_path: Path, per_class: int = 3) -> int:
    argv = ["probe", "--gateway", gateway, "--pushgateway", pushgateway]
    for setting in _settings(tmp_path, per_class):
        argv += ["-c", setting]
    return main(argv)


def _pushed(body: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    }


def test_a_lossless_run_pushes_agreement_acceptance_and_its_time(
    tmp_path: Path, pushgateway: RecordingPushgateway
) -> None:
    config = _config(tmp_path)
    header = config.routing.class_header
    with ScriptedGateway(SPECULATIVE, BASELINE, header) as gateway:
        assert _probe(gateway.url, pushgateway.url, tmp_path) == 0
        log = list(gateway.log)
    # Each probed prompt once with its class in the header, once with no header at all.
    with_header = sorted(entry.headers[header] for entry in log if header in entry.headers)
    assert with_header == sorted([*["structured"] * 3, *["open_ended"] * 3])
    assert sum(header not in entry.headers for entry in log) == 6
    assert {entry.body["temperature"] for entry in log} == {0.0}
    assert {entry.body["max_tokens"] for entry in log} == {TOKENS}
    assert "not probed" not in json.dumps([entry.body for entry in log])
    [(method, path, body)] = pushgateway.pushes
    assert (method, path) == ("PUT", f"/metrics/job/{jobs(config)['probe']}")
    pushed = _pushed(body)
    assert pushed[(PROBE_AGREEMENT, ())] == 1.0
    # Tokens per chunk after the first: 3 on the speculative arm, 1 on the baseline.
    expected = (3 / 1 - 1) / served_k(config, local=False)
    for name in CLASSES:
        assert pushed[(PROBE_ACCEPTANCE, (("class", name),))] == pytest.approx(expected)
        # The like-with-like pair of "speculation stopped paying": both arms, every class.
        for arm in ("speculative", "baseline"):
            assert pushed[(PROBE_TOKEN_TIME, (("arm", arm), ("class", name)))] >= 0
    assert pushed[(PROBE_LAST_SUCCESS, ())] > 1.7e9


def test_a_lossy_speculative_arm_pushes_agreement_below_one(
    tmp_path: Path, pushgateway: RecordingPushgateway
) -> None:
    header = _config(tmp_path).routing.class_header
    with ScriptedGateway(LOSSY, BASELINE, header) as gateway:
        assert _probe(gateway.url, pushgateway.url, tmp_path) == 0
    [(_, _, body)] = pushgateway.pushes
    # Every output diverges at token 8 of 16.
    assert _pushed(body)[(PROBE_AGREEMENT, ())] == pytest.approx(0.5)


def test_a_failing_server_pushes_nothing_and_exits_non_zero(
    tmp_path: Path, pushgateway: RecordingPushgateway, capsys: pytest.CaptureFixture[str]
) -> None:
    header = _config(tmp_path).routing.class_header
    with ScriptedGateway(FAILING, BASELINE, header) as gateway:
        assert _probe(gateway.url, pushgateway.url, tmp_path) == 1
        sent = len(gateway.log)
    assert pushgateway.pushes == []
    assert sent == len(CLASSES) * 3 * 2  # every request tried once: no retries
    out, err = capsys.readouterr()
    assert "failed: 6 x http_5xx" in out
    assert "6 failures; nothing pushed" in err
    assert "count to" not in out + err and "story" not in out + err  # ids, never prompts


def test_an_unreachable_pushgateway_exits_non_zero(tmp_path: Path) -> None:
    header = _config(tmp_path).routing.class_header
    with ScriptedGateway(SPECULATIVE, BASELINE, header) as gateway:
        # Port 9 (discard) on loopback: nothing listens there.
        assert _probe(gateway.url, "http://127.0.0.1:9", tmp_path) == 1


@pytest.mark.parametrize("per_class", [1, 4])
def test_requests_are_bounded_by_classes_prompts_and_arms(tmp_path: Path, per_class: int) -> None:
    config = _config(tmp_path, per_class)
    with ScriptedGateway(SPECULATIVE, BASELINE, config.routing.class_header) as gateway:
        run = run_probe(config, gateway.url)
        sent = len(gateway.log)
    assert run.complete
    assert sent == run.requests == len(CLASSES) * per_class * 2
    assert run.selected == {
        "structured": [f"s{i}" for i in range(per_class)],
        "open_ended": [f"o{i}" for i in range(per_class)],
    }


def test_nothing_is_sent_past_the_deadline(tmp_path: Path) -> None:
    config = _config(tmp_path)
    deadline_s = config.guardrails.probe.deadline_s
    ticks = iter([0.0, 0.0, 1.0])  # the start, two requests, then time is up

    def clock() -> float:
        return next(ticks, float(deadline_s))

    with ScriptedGateway(SPECULATIVE, BASELINE, config.routing.class_header) as gateway:
        run = run_probe(config, gateway.url, clock=clock)
        sent = len(gateway.log)
    assert sent == run.requests == 2
    assert run.failures == {DEADLINE: len(CLASSES) * 3 * 2 - 2}
    assert not run.complete


def test_a_speculative_class_without_prompts_is_refused(tmp_path: Path) -> None:
    prompts = tmp_path / "structured_only.jsonl"
    prompts.write_text(json.dumps({"id": "s", "class": "structured", "prompt": "p"}) + "\n")
    config = ExperimentConfig.model_validate(
        {
            "loadtest": {"prompts": {"files": [str(prompts)]}},
            "routing": {"speculative_classes": list(CLASSES)},
        }
    )
    with pytest.raises(ValueError, match=r"'open_ended' but loadtest\.prompts\.files hold no"):
        run_probe(config, "http://127.0.0.1:9")


def test_the_pushed_time_per_token_is_each_class_and_arms_own(tmp_path: Path) -> None:
    config = _config(tmp_path)
    run = ProbeRun(
        selected={name: [] for name in CLASSES},
        acceptance={name: 0.5 for name in CLASSES},
        token_time={
            name: {Arm.SPECULATIVE: 0.01 * (i + 1), Arm.BASELINE: 0.05 * (i + 1)}
            for i, name in enumerate(CLASSES)
        },
        agreement=1.0,
    )
    pushed = _pushed(generate_latest(registry_of(config, run, 1.8e9)).decode())
    for i, name in enumerate(CLASSES):
        key = (PROBE_TOKEN_TIME, (("arm", "speculative"), ("class", name)))
        assert pushed[key] == pytest.approx(0.01 * (i + 1))
        key = (PROBE_TOKEN_TIME, (("arm", "baseline"), ("class", name)))
        assert pushed[key] == pytest.approx(0.05 * (i + 1))
