"""Command-line entry points: clear errors for bad input, the scripted server as a process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import requests

from loadtest.__main__ import main
from loadtest.client import RequestParams, stream_request
from loadtest.records import RequestRecord
from loadtest.transport import StreamSession

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
    code = main(["run", "--local", "--prompts", missing, "--out", str(tmp_path / "r")])
    assert code == 2 and "does not exist" in capsys.readouterr().err


def test_scripted_server_runs_as_a_process(tmp_path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"ttft_s": 0.01, "chunk_tokens": [2, 3], "gaps_s": 0.01}]))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "loadtest.scripted_server",
            "--script",
            str(script),
            "--spec-decode-k",
            "4",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        assert process.stdout is not None
        url = json.loads(process.stdout.readline())["url"]
        with StreamSession() as session:
            record = stream_request(
                session,
                url,
                "x",
                RequestParams(model="m", max_tokens=5),
                RequestRecord("baseline", 0, "p", "c"),
            )
        log = requests.get(f"{url}/_scripted/log", timeout=5).json()
        metrics = requests.get(f"{url}/metrics", timeout=5).text
    finally:
        process.terminate()
        process.wait(timeout=10)
    assert record.ok and record.chunk_tokens == [2, 3]
    assert log[0]["chunk_tokens"] == [2, 3] and len(log[0]["send_times"]) == 2
    assert 'vllm:spec_decode_num_drafts_total{engine="0"' in metrics


def test_bad_script_file_names_the_fields(tmp_path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"ttft": 0.01}))
    result = subprocess.run(
        [sys.executable, "-m", "loadtest.scripted_server", "--script", str(script)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        timeout=30,
        check=False,
    )
    assert result.returncode != 0 and "script fields are" in result.stderr


def test_local_flag_uses_the_local_scale_and_explicit_flags_win() -> None:
    from experiment import build_config
    from loadtest.__main__ import _overrides, _parser
    from loadtest.plan import Overrides

    config = build_config({})
    local = _overrides(_parser().parse_args(["run", "--local"]), config)
    assert (local.max_tokens, local.concurrency, local.requests_per_prompt) == (
        config.local.max_tokens,
        config.local.concurrency,
        config.local.requests_per_prompt,
    )
    assert Overrides.local_scale(config).max_tokens == config.local.max_tokens
    explicit = _overrides(_parser().parse_args(["run", "--local", "--max-tokens", "9"]), config)
    assert explicit.max_tokens == 9
    plain = _overrides(_parser().parse_args(["run"]), config)
    assert plain.max_tokens is None and plain.concurrency is None
