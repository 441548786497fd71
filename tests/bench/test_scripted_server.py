"""The scripted server (bench/scripted_server.py), the ground truth of the load-test tests
and of the bench, run as a process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from loadtest.client import RequestParams, stream_request
from loadtest.records import RequestRecord
from loadtest.transport import StreamSession

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]


def test_scripted_server_runs_as_a_process(tmp_path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"ttft_s": 0.01, "chunk_tokens": [2, 3], "gaps_s": 0.01}]))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.scripted_server",
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
        [sys.executable, "-m", "bench.scripted_server", "--script", str(script)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        timeout=30,
        check=False,
    )
    assert result.returncode != 0 and "script fields are" in result.stderr
