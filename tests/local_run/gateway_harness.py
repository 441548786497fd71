"""Shared by the gateway tests: fake arm processes, a streaming client that records which arm
answered and why a stream failed, a gateway in front of two servers, and the load test's
tiered run through it (its prompts and command line)."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.scripted_server import Script
from experiment.config import Arm, HealthConfig, RoutingConfig
from local_run.gateway import Address, EnvoyGateway, envoy_bootstrap
from local_run.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
FAKE_ARM = Path(__file__).with_name("fake_streaming_arm.py")
SCRIPTED_ARM = Path(__file__).with_name("scripted_arm.py")
HOST = "127.0.0.1"
# Short ejections so a test sees the server return; the shipped defaults are in experiment/config.
FAST_HEALTH = HealthConfig(consecutive_5xx=3, interval_s=0.5, base_ejection_time_s=2.0)


def _wait_listening(
    process: subprocess.Popen[bytes], name: str, port: int, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{name} did not listen on {port} (exit code {process.poll()})")


def _kill(process: subprocess.Popen[bytes] | None) -> None:
    """SIGKILL to the process group: it dies at once, its sockets close under open streams."""
    if process is not None and process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


@dataclass
class FakeArm:
    name: str
    port: int
    chunks: int
    gap_s: float
    status: int = 200
    process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 10.0) -> None:
        self.process = subprocess.Popen(
            [
                *(sys.executable, str(FAKE_ARM), "--port", str(self.port), "--name", self.name),
                *("--chunks", str(self.chunks), "--gap", str(self.gap_s)),
                *("--status", str(self.status)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        _wait_listening(self.process, f"fake arm {self.name}", self.port, timeout_s)

    def kill(self) -> None:
        """SIGKILL: the process dies at once, its sockets close under the open streams."""
        process, self.process = self.process, None
        _kill(process)

    def received(self) -> list[list[str] | None]:
        with urllib.request.urlopen(f"http://{HOST}:{self.port}/_received", timeout=5) as reply:
            data: list[list[str] | None] = json.loads(reply.read())
            return data


@dataclass
class Outcome:
    status: int | None = None
    arm: str | None = None
    chunks: int = 0
    done: bool = False
    reason: str | None = None  # why the request failed; None when it completed

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.done and self.reason is None


def send(
    url: str,
    headers: Sequence[tuple[str, str]] = (),
    *,
    started: threading.Event | None = None,
    timeout_s: float = 15.0,
) -> Outcome:
    """One streamed completion through ``url``; headers are sent exactly as given (repeats
    and surrounding whitespace included). ``started`` is set at the first chunk."""
    host, port = url.removeprefix("http://").split(":")
    outcome = Outcome()
    connection = http.client.HTTPConnection(host, int(port), timeout=timeout_s)
    try:
        connection.putrequest("POST", "/v1/completions", skip_accept_encoding=True)
        for name, value in headers:
            connection.putheader(name, value)
        body = b'{"prompt": "x", "stream": true}'
        connection.putheader("Content-Type", "application/json")
        connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        response = connection.getresponse()
        outcome.status, outcome.arm = response.status, response.getheader("x-arm")
        if response.status != 200:
            outcome.reason = f"http_{response.status}"
            response.read()
            return outcome
        while line := response.readline():
            if line.startswith(b"data: [DONE]"):
                outcome.done = True
            elif line.startswith(b"data: "):
                outcome.chunks += 1
                if started is not None:
                    started.set()
        if not outcome.done:
            outcome.reason = "ended_without_done"
    except http.client.IncompleteRead:
        outcome.reason = "incomplete_chunk"
    except ConnectionResetError:
        outcome.reason = "connection_reset"
    except http.client.RemoteDisconnected:
        outcome.reason = "disconnected_before_response"
    except TimeoutError:
        outcome.reason = "timeout"
    finally:
        connection.close()
    return outcome


def stat(gateway: EnvoyGateway, name: str) -> int:
    return gateway.stats().get(name, 0)


def gateway_between(
    routing: RoutingConfig, baseline: Address, speculative: Address, work_dir: Path
) -> EnvoyGateway:
    """The gateway rendered from ``routing`` in front of two servers, on a free port; a
    context manager that starts and always stops it."""
    bootstrap = envoy_bootstrap(
        routing,
        listen=Address(HOST, free_port()),
        baseline=baseline,
        speculative=speculative,
        admin=Address(HOST, 0),
    )
    return EnvoyGateway(bootstrap, work_dir)


@contextlib.contextmanager
def tiered(
    routing: RoutingConfig,
    work_dir: Path,
    *,
    speculative_chunks: int = 5,
    gap_s: float = 0.01,
    baseline_chunks: int = 5,
    baseline_gap_s: float = 0.01,
) -> Iterator[tuple[EnvoyGateway, dict[Arm, FakeArm]]]:
    """Two fake arms on free ports and the rendered gateway in front of them."""
    arms = {
        Arm.BASELINE: FakeArm(Arm.BASELINE.value, free_port(), baseline_chunks, baseline_gap_s),
        Arm.SPECULATIVE: FakeArm(Arm.SPECULATIVE.value, free_port(), speculative_chunks, gap_s),
    }
    baseline = Address(HOST, arms[Arm.BASELINE].port)
    speculative = Address(HOST, arms[Arm.SPECULATIVE].port)
    try:
        for arm in arms.values():
            arm.start()
        with gateway_between(routing, baseline, speculative, work_dir) as gateway:
            yield gateway, arms
    finally:
        for arm in arms.values():
            arm.kill()


@dataclass
class ScriptedArm:
    """A scripted server (bench/scripted_server.py) as a process of its own on ``port``
    (tests/local_run/scripted_arm.py): killed for real, started again on the same port.
    ``die_at``: it SIGKILLs itself on cue after that many requests, with at least
    ``min_open`` streams open, and dumps its log to ``dump`` (scripted_arm.py says when)."""

    port: int
    script: Script
    spec_decode_k: int | None = None
    die_at: int | None = None
    dump: Path | None = None
    min_open: int = 1
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self, timeout_s: float = 20.0) -> None:
        command = [
            *(sys.executable, str(SCRIPTED_ARM), "--port", str(self.port)),
            *("--script", json.dumps(asdict(self.script))),
        ]
        if self.spec_decode_k is not None:
            command += ["--spec-decode-k", str(self.spec_decode_k)]
        if self.die_at is not None:
            command += ["--die-at", str(self.die_at), "--dump", str(self.dump)]
            command += ["--min-open", str(self.min_open)]
        self.process = subprocess.Popen(
            command,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        _wait_listening(self.process, "scripted arm", self.port, timeout_s)

    def kill(self) -> None:
        process, self.process = self.process, None
        _kill(process)

    def log(self) -> list[dict[str, Any]]:
        """What it began and sent (``SentLog`` entries as JSON), since it last started."""
        with urllib.request.urlopen(f"{self.url}/_scripted/log", timeout=5) as reply:
            entries: list[dict[str, Any]] = json.loads(reply.read())
            return entries


def write_prompts(directory: Path) -> Path:
    """A prompts file of four prompts per class: ``count to i`` (``s<i>``, structured) and
    ``story i`` (``o<i>``, open_ended)."""
    lines = [{"id": f"s{i}", "class": "structured", "prompt": f"count to {i}"} for i in range(4)]
    lines += [{"id": f"o{i}", "class": "open_ended", "prompt": f"story {i}"} for i in range(4)]
    path = directory / "prompts.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


def tiered_run_command(
    baseline: str, speculative: str, gateway: str, out: Path, settings: Mapping[str, object]
) -> list[str]:
    """``python -m loadtest run --tiered`` against the three URLs into ``out``; ``settings``
    are ``loadtest.<key>`` values (a list as JSON). Run it in ROOT with loadtest_env()."""
    values = [
        f"loadtest.{key}={json.dumps(value) if isinstance(value, list) else value}"
        for key, value in settings.items()
    ]
    return [
        *(sys.executable, "-m", "loadtest", "run", "--no-cloudwatch"),
        *("--baseline", baseline, "--speculative", speculative, "--tiered", gateway),
        *("--out", str(out)),
        *(arg for value in values for arg in ("-c", value)),
    ]


def loadtest_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "AWS_EC2_METADATA_DISABLED": "true"}
