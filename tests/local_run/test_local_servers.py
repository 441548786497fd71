"""The launcher against a stand-in server: readiness, failure reporting, teardown, signals."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from local_run import servers as servers_module
from local_run.servers import (
    OMP_BIND_ENV,
    LocalServers,
    Server,
    ServerError,
    bind_apart,
    free_port,
    host_env,
    port_is_free,
)
from runtime.render import VllmCommand

pytestmark = pytest.mark.process

HERE = Path(__file__).resolve().parent
FAKE = "fake_vllm_server"


def fake_server(tmp_path: Path, name: str = "baseline", *extra: str, model: str = "tiny") -> Server:
    port = free_port()
    command = VllmCommand(
        FAKE, ("--port", str(port), "--model-name", model, *extra), {"PYTHONPATH": str(HERE)}
    )
    return Server(
        name=name,
        command=command,
        host="127.0.0.1",
        port=port,
        served_model_name="tiny",
        log_path=tmp_path / "logs" / f"{name}.log",
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0): count it as gone.
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "State:\tZ" in status.read_text())


def wait_gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.1)
    return False


@pytest.fixture(autouse=True)
def quick_polling(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(servers_module, "POLL_INTERVAL_S", 0.1)
    monkeypatch.setattr(servers_module, "PROGRESS_EVERY_S", 0.5)


def test_starts_waits_logs_and_stops_every_process(tmp_path: Path) -> None:
    child_file = tmp_path / "child.pid"
    server = fake_server(tmp_path, "baseline", "--delay", "1", "--child-pid-file", str(child_file))
    messages: list[str] = []
    with LocalServers([server], startup_timeout_s=30, log=messages.append) as running:
        assert running["baseline"].probe()
        assert server.ready_after_s is not None and server.ready_after_s >= 1
        child = int(child_file.read_text())
        assert alive(child)
        leader = server.process.pid  # type: ignore[union-attr]
    assert wait_gone(leader) and wait_gone(child), "the server's process group outlived the run"
    assert port_is_free("127.0.0.1", server.port)
    log = server.log_path.read_text()
    assert log.startswith(f"$ {sys.executable} -m {FAKE} --port {server.port}")
    assert "fake vllm listening" in log
    assert any("waiting for baseline" in m for m in messages)  # progress while it starts
    assert any("baseline ready" in m for m in messages)


def test_servers_bound_apart_start_with_their_own_cores(tmp_path: Path) -> None:
    servers = [fake_server(tmp_path, "baseline"), fake_server(tmp_path, "speculative")]
    bind_apart(servers, cores={0, 1, 2})
    with LocalServers(servers, startup_timeout_s=30, log=lambda _: None):
        environs = [
            Path(f"/proc/{s.process.pid}/environ").read_bytes().split(b"\0")  # type: ignore[union-attr]
            for s in servers
        ]
    assert f"{OMP_BIND_ENV}=0,1".encode() in environs[0]
    assert f"{OMP_BIND_ENV}=2".encode() in environs[1]


def test_a_server_waited_for_late_reports_progress_once_per_interval(tmp_path: Path) -> None:
    """The second server is waited for only once the first is ready: its progress lines
    continue from its own start, one per interval, not one per interval already missed."""
    slow = fake_server(tmp_path, "baseline", "--delay", "1.6")
    later = fake_server(tmp_path, "speculative", "--delay", "2.4")
    messages: list[str] = []
    with LocalServers([slow, later], startup_timeout_s=30, log=messages.append):
        pass
    waits = [m for m in messages if m.startswith("servers: waiting for speculative")]
    # Ready after ~2.4 s, waited for from ~1.6 s: the 2.0 s mark only (0.5 s intervals).
    assert 1 <= len(waits) <= 2, waits


def test_not_ready_until_the_served_model_is_listed(tmp_path: Path) -> None:
    server = fake_server(tmp_path, "baseline", model="some-other-model")
    with pytest.raises(ServerError, match=r"not ready after 2s .*startup_timeout_s"):
        LocalServers([server], startup_timeout_s=2, log=lambda _: None).__enter__()
    assert wait_gone(server.process.pid)  # type: ignore[union-attr]


def test_a_server_that_dies_is_reported_with_its_log_and_the_others_are_stopped(
    tmp_path: Path,
) -> None:
    first = fake_server(tmp_path, "baseline")
    second = fake_server(tmp_path, "speculative", "--exit-code", "3")
    with (
        pytest.raises(ServerError) as raised,
        LocalServers([first, second], startup_timeout_s=30, log=lambda _: None),
    ):
        pytest.fail("must not get here")
    message = str(raised.value)
    assert "speculative: vLLM exited with code 3" in message
    assert "failing on purpose" in message  # the log tail is in the error
    assert str(second.log_path) in message
    assert wait_gone(first.process.pid)  # type: ignore[union-attr]


def test_all_servers_start_at_once_and_are_all_waited_for(tmp_path: Path) -> None:
    """The second server starts without waiting for the first to be ready (their start-ups
    overlap), and entering returns only once both are ready."""
    slow = fake_server(tmp_path, "baseline", "--delay", "1")
    fast = fake_server(tmp_path, "speculative")
    with LocalServers([slow, fast], startup_timeout_s=30, log=lambda _: None) as running:
        assert all(s.probe() for s in running.servers)
        assert slow.started_at is not None and fast.started_at is not None
        assert fast.started_at - slow.started_at < 0.5  # not after the first's 1 s delay
        assert slow.ready_after_s is not None and slow.ready_after_s >= 1
        assert running.startup_seconds is not None and running.startup_seconds >= 1
    assert all(wait_gone(s.process.pid) for s in running.servers)  # type: ignore[union-attr]


def test_an_exception_in_the_body_stops_the_servers(tmp_path: Path) -> None:
    server = fake_server(tmp_path)
    with pytest.raises(RuntimeError, match="boom"), LocalServers([server], 30, lambda _: None):
        raise RuntimeError("boom")
    assert wait_gone(server.process.pid)  # type: ignore[union-attr]


def test_a_server_ignoring_sigterm_is_killed_after_the_grace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(servers_module, "STOP_GRACE_S", 1.0)
    server = fake_server(tmp_path, "baseline", "--ignore-sigterm")
    started = time.monotonic()
    with LocalServers([server], 30, lambda _: None):
        pass
    assert wait_gone(server.process.pid)  # type: ignore[union-attr]
    assert time.monotonic() - started < 15


def test_port_in_use_is_an_actionable_error(tmp_path: Path) -> None:
    server = fake_server(tmp_path)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", server.port))
        busy.listen()
        with pytest.raises(ServerError, match=r"already in use.*experiment\.local\.baseline_port"):
            server.start()
    assert server.process is None


def test_host_env_is_offline_and_preloads_intel_openmp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    env = host_env({"VLLM_CPU_KVCACHE_SPACE": "1"})
    assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    if servers_module.IOMP_LIBRARY.is_file():
        assert env["LD_PRELOAD"].split(":")[0] == str(servers_module.IOMP_LIBRARY)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signals_to_the_launcher_stop_the_servers(tmp_path: Path, signum: int) -> None:
    """SIGTERM (kill, CI cancel) and SIGINT (Ctrl-C) both leave no server behind."""
    port = free_port()
    child_file = tmp_path / "child.pid"
    ready_file = tmp_path / "ready"
    script = textwrap.dedent(
        f"""
        import signal, sys, time
        from pathlib import Path
        # A background shell starts us with SIGINT ignored; a terminal's Ctrl-C is what we test.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from local_run.servers import LocalServers, Server, sigterm_raises
        from runtime.render import VllmCommand
        args = ("--port", "{port}", "--child-pid-file", {str(child_file)!r})
        command = VllmCommand({FAKE!r}, args, {{"PYTHONPATH": {str(HERE)!r}}})
        server = Server("baseline", command, "127.0.0.1", {port}, "tiny",
                        Path({str(tmp_path / "server.log")!r}))
        try:
            with sigterm_raises(), LocalServers([server], 30, print):
                Path({str(ready_file)!r}).write_text(str(server.process.pid))
                time.sleep(120)
        except KeyboardInterrupt:
            sys.exit(130)
        """
    )
    launcher = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=HERE.parent.parent,
        env={**os.environ, "PYTHONPATH": str(HERE.parent.parent)},
    )
    try:
        deadline = time.monotonic() + 30
        while not ready_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ready_file.exists(), "the launcher did not get its server ready"
        server_pid, child_pid = int(ready_file.read_text()), int(child_file.read_text())
        launcher.send_signal(signum)
        code = launcher.wait(timeout=60)
        assert code == (128 + signal.SIGTERM if signum == signal.SIGTERM else 130)
        assert wait_gone(server_pid) and wait_gone(child_pid)
    finally:
        if launcher.poll() is None:
            launcher.kill()


def test_run_local_makes_both_models_before_any_server_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """run_local's wiring: the model pair first (generation has every core to itself), then
    both servers, serving that pair's directories; all stopped after."""
    from experiment import build_config
    from local_run import run as run_module
    from local_run.models import ModelPair

    baseline = fake_server(tmp_path, "baseline")
    speculative = fake_server(tmp_path, "speculative")
    events: list[str] = []
    pair = ModelPair(tmp_path / "models", {}, "drafts/small-key")

    def ensure_models(local: object, log: object) -> ModelPair:
        started = [s.name for s in (baseline, speculative) if s.process is not None]
        events.append(f"models (servers started: {started})")
        return pair

    def arm_servers(config: object, target: Path, draft: Path, log_dir: Path) -> list[Server]:
        events.append(f"servers for {target.relative_to(tmp_path)}, {draft.relative_to(tmp_path)}")
        return [baseline, speculative]

    monkeypatch.setattr(run_module, "ensure_models", ensure_models)
    monkeypatch.setattr(run_module, "arm_servers", arm_servers)
    monkeypatch.setattr(run_module, "smoke_check", lambda *_: {})
    config = build_config({"experiment.local.runs_dir": str(tmp_path / "runs")})
    result = run_module.run_local(config, smoke_only=True, log=lambda _: None)
    assert result.ok
    assert events == [
        "models (servers started: [])",
        "servers for models/target, models/drafts/small-key",
    ]
    assert all(wait_gone(s.process.pid) for s in (baseline, speculative))  # type: ignore[union-attr]


def test_exit_code_of_maps_server_failures_and_ctrl_c(capsys: pytest.CaptureFixture[str]) -> None:
    def failing() -> int:
        raise ServerError("baseline: not ready")

    def interrupted() -> int:
        raise KeyboardInterrupt

    assert servers_module.exit_code_of(lambda: 7) == 7
    assert servers_module.exit_code_of(failing) == 1
    assert "error: baseline: not ready" in capsys.readouterr().err
    assert servers_module.exit_code_of(interrupted) == 130
    assert "servers stopped" in capsys.readouterr().err
    previous = signal.getsignal(signal.SIGTERM)

    def terminated() -> int:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
        return 0

    with pytest.raises(SystemExit) as exit_:  # SIGTERM unwinds as Terminated(128 + 15)
        servers_module.exit_code_of(terminated)
    assert exit_.value.code == 143
    assert signal.getsignal(signal.SIGTERM) == previous


def test_go_offline_keeps_what_the_caller_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "0")
    servers_module.go_offline()
    assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ["TRANSFORMERS_OFFLINE"] == "0"
