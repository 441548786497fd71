"""Command-line entry points: clear errors for bad input; exit codes, cancelling and
workers with the real process against the scripted server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.scripted_server import Script, unused_loopback_url
from loadtest.__main__ import main
from loadtest.runner import exit_code
from loadtest.summary import summarize

ROOT = Path(__file__).resolve().parents[2]


def test_bad_input_exits_2_with_what_to_change(tmp_path, capsys) -> None:
    assert main(["report", str(tmp_path)]) == 2
    assert "not a load-test run directory" in capsys.readouterr().err
    out = tmp_path / "never"
    bad_url = ["run", "--baseline", "localhost:1", "--speculative", "http://x", "--out", str(out)]
    assert main(bad_url) == 2
    assert "must start with http://" in capsys.readouterr().err
    assert not out.exists()  # rejected input leaves nothing behind
    assert main(["run", "--speculative", "http://x"]) == 2
    assert "--baseline URL" in capsys.readouterr().err
    code = main(["run", "--local", "--set", "loadtest.concurrency=0", "--no-cloudwatch"])
    assert code == 2 and "loadtest.concurrency" in capsys.readouterr().err
    missing = str(tmp_path / "absent.jsonl")
    prompts = ["-c", f'loadtest.prompts.files=["{missing}"]']
    code = main(["run", "--local", *prompts, "--out", str(tmp_path / "r")])
    assert code == 2 and "does not exist" in capsys.readouterr().err


def test_load_flags_are_gone_in_favour_of_c(capsys) -> None:
    """The load is set once, as configuration keys: no flag restates a loadtest.* field."""
    import re

    from experiment.config import LoadTestConfig
    from loadtest.__main__ import _parser

    with pytest.raises(SystemExit):
        _parser().parse_args(["run", "--help"])
    options = set(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", capsys.readouterr().out))
    restated = {f"--{name.replace('_', '-')}" for name in LoadTestConfig.model_fields}
    assert options & restated == set()
    assert {"--config", "-c", "--help-config", "--baseline", "--max-requests"} <= options


def test_local_flag_uses_the_local_scale_and_c_sets_it() -> None:
    from loadtest.__main__ import _config, _parser

    local = _config(_parser().parse_args(["run", "--local"])).loadtest
    config = _config(_parser().parse_args(["run"]))
    assert (local.max_tokens, local.concurrency, local.requests_per_prompt) == (
        config.local.max_tokens,
        config.local.concurrency,
        config.local.requests_per_prompt,
    )
    assert config.loadtest.max_tokens != config.local.max_tokens  # without --local: trn2 scale
    set_local = _parser().parse_args(["run", "--local", "-c", "local.max_tokens=9"])
    assert _config(set_local).loadtest.max_tokens == 9
    plain = _parser().parse_args(["run", "-c", "loadtest.max_tokens=9"])
    assert _config(plain).loadtest.max_tokens == 9


def test_tiered_url_reaches_the_comparison_and_local_tiered_defaults_it(monkeypatch) -> None:
    """--tiered URL drives the gateway as the third arm; with --local and local.tiered the
    local gateway's port is the default, and without either there is no tiered arm."""
    import loadtest.runner

    seen: list[str | None] = []

    def capture(*_args, tiered_url=None, **_kwargs):
        seen.append(tiered_url)
        raise ValueError("captured")

    monkeypatch.setattr(loadtest.runner, "run_comparison", capture)
    urls = ["--baseline", "http://b", "--speculative", "http://s"]
    assert main(["run", *urls, "--tiered", "http://g:9"]) == 2
    assert main(["run", "--local", "-c", "local.tiered=true", "-c", "local.gateway_port=8999"]) == 2
    assert main(["run", "--local"]) == 2
    assert seen == ["http://g:9", "http://127.0.0.1:8999", None]


@pytest.mark.process
def test_run_help_config_lists_the_load_keys_with_descriptions() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "loadtest", "run", "--help-config"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "loadtest.concurrency (int, default 4)" in result.stdout
    assert "loadtest.prompts.files" in result.stdout


# python -m loadtest run as a real process (issue 13; issue 15 items 10 and 11).
SMALL = ["-c", "loadtest.max_tokens=6", "-c", "loadtest.requests_per_prompt=2",
         "-c", "loadtest.concurrency=4", "-c", "loadtest.warmup_requests=1",
         "--no-cloudwatch"]  # fmt: skip


def _cli(args: list[str]) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "loadtest", "run", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as a shell gives a foreground job
    )


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


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_an_arm_without_a_successful_request_exits_1_and_writes_the_report(serve, tmp_path) -> None:
    server = serve(Script(ttft_s=0.01, chunk_tokens=[2, 2, 2], gaps_s=0.005))
    out = tmp_path / "run"
    args = ["--baseline", server.url, "--speculative", unused_loopback_url(), "--out", str(out)]
    process = _cli([*args, *SMALL, "--max-requests", "6"])
    output, _ = process.communicate(timeout=240)
    assert process.returncode == 1, output
    assert "loadtest.max_failure_share" in output
    assert (out / "report.md").is_file() and (out / "summary.json").is_file()


def test_exit_code_follows_the_failure_share_bound(fake_run_dir) -> None:
    summary = summarize(fake_run_dir)
    shares = [arm.overall.failed / arm.overall.requests for arm in summary.arms.values()]
    worst = max(shares)
    assert 0 < worst < 1
    assert exit_code(summary, 0.0) == 1  # the default: any failure, as Locust does
    assert exit_code(summary, worst) == 0  # at the bound is accepted, above it is not
    assert exit_code(summary, worst * 0.99) == 1
    summary.arms["baseline"].overall.succeeded = 0
    assert exit_code(summary, 0.99) == 1  # no successful request: never a pass
    summary.cancelled_by = "SIGTERM"
    assert exit_code(summary, 0.99) == 143
    summary.cancelled_by = "SIGINT"
    assert exit_code(summary, 0.99) == 130


@pytest.mark.integration
@pytest.mark.parametrize(
    ("sig", "code", "workers", "mode"),
    [
        (signal.SIGINT, 130, 2, "concurrent"),
        (signal.SIGTERM, 143, 2, "concurrent"),
        (signal.SIGINT, 130, 1, "concurrent"),
        (signal.SIGTERM, 143, 1, "sequential"),
    ],
)
def test_cancel_stops_the_load_keeps_records_and_reports_partial_run(
    serve, tmp_path, sig: signal.Signals, code: int, workers: int, mode: str
) -> None:
    server = serve(Script(ttft_s=0.05, chunk_tokens=[1] * 10, gaps_s=0.1))  # ~1 s each
    out = tmp_path / f"run-{sig.name}-{workers}-{mode}"
    # Concurrent arms take this port and the next one.
    port = {signal.SIGINT: 8521, signal.SIGTERM: 8525}[sig]
    process = _cli(
        ["--baseline", server.url, "--speculative", server.url, "--out", str(out),
         "-c", f"loadtest.workers={workers}", "-c", f"loadtest.master_port={port}",
         "-c", f"loadtest.arms_mode={mode}", *SMALL]
    )  # fmt: skip
    running = ["baseline", "speculative"] if mode == "concurrent" else ["baseline"]
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        files = [out / f"records_{arm}.jsonl" for arm in running]
        if all(f.is_file() and f.read_text().count('"warmup":false') >= 3 for f in files):
            break
        time.sleep(0.1)
    os.killpg(process.pid, sig)  # what Ctrl-C (SIGINT) or a pod's deadline (SIGTERM) sends
    started = time.monotonic()
    output, _ = process.communicate(timeout=60)
    assert time.monotonic() - started < 30, output
    assert process.returncode == code, output
    assert _survivors(str(out)) == []
    for master in (port, port + 1):
        assert _survivors(f"--master-port {master}") == []
    summary = json.loads((out / "summary.json").read_text())
    assert summary["cancelled_by"] == sig.name
    for arm in running:  # both arms of a concurrent run were under way: both keep theirs
        assert summary["arms"][arm]["stopped_by"] == "cancelled"
        assert summary["arms"][arm]["overall"]["requests"] >= 3  # measured records kept
    if mode == "sequential":
        assert summary["arms"]["speculative"]["stopped_by"] == "not_run"
    assert summary["run"]["arms_mode"] == mode
    assert (out / "report.md").is_file()
    assert summary["warnings"][0].startswith(f"cancelled by {sig.name}")


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_workers_run_has_the_single_process_schema_plus_workers(serve, tmp_path) -> None:
    server = serve(Script(ttft_s=0.01, chunk_tokens=[2, 2, 2], gaps_s=0.005))
    sd = serve(Script(ttft_s=0.01, chunk_tokens=[2, 2, 2], gaps_s=0.005), spec_decode_k=4)
    out = tmp_path / "run"
    process = _cli(
        ["--baseline", server.url, "--speculative", sd.url, "--out", str(out),
         "-c", "loadtest.workers=2", "-c", "loadtest.master_port=8537", *SMALL,
         "--max-requests", "10"]
    )  # fmt: skip
    output, _ = process.communicate(timeout=240)
    assert process.returncode == 0, output
    summary = json.loads((out / "summary.json").read_text())
    for arm in ("baseline", "speculative"):
        block = summary["arms"][arm]
        assert block["workers"] == 2 and set(block["worker_cpu"]) == {"0", "1"}
        assert block["clock_skew_ms"] is not None and block["lost_workers"] == []
        assert block["overall"]["requests"] == 10 and block["overall"]["failed"] == 0
        assert block["window_s"] > 0
    # Acceptance from the master's /metrics deltas around the one window: the measured
    # requests' chunks exactly (3 chunks of 2 tokens each: 1 of 4 drafts accepted per chunk).
    acceptance = summary["arms"]["speculative"]["acceptance"]
    assert acceptance["drafts"] == 10 * 3 and acceptance["accepted_tokens"] == 10 * 3
    assert acceptance["draft_tokens"] == 10 * 3 * 4
    assert summary["lossless"]["prompts_compared"] > 0
    assert summary["lossless"]["exact_matches"] == summary["lossless"]["prompts_compared"]
    assert _survivors(str(out)) == []
