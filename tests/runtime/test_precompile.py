"""runtime.precompile against a stand-in vLLM server (same module path, real process).

The stand-in writes "compiled" files into NEURON_COMPILED_ARTIFACTS and then answers
/health, like the fork's loader does after compiling; it listens on an ephemeral port.
"""

from __future__ import annotations

import dataclasses
import json
import socket
from pathlib import Path

import pytest

from experiment import build_config
from experiment.config import Arm
from runtime import precompile
from runtime.artifacts import MARKER_NAME, compile_fingerprint, read_marker
from runtime.validate import SpecError

pytestmark = pytest.mark.process

FAKE_SERVER = """
import argparse, http.server, os, pathlib, sys
parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int)
parser.add_argument("--host")
args, _ = parser.parse_known_args()
out = pathlib.Path(os.environ["NEURON_COMPILED_ARTIFACTS"])
if os.environ.get("FAKE_FAIL"):
    sys.exit(7)
(out / "weights").mkdir(parents=True, exist_ok=True)
(out / "model.pt").write_bytes(b"graph")
(out / "weights" / "tp0.safetensors").write_bytes(b"w" * 1000)
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", args.port), Health).serve_forever()
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def fake_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    module = tmp_path / "fake" / "vllm" / "entrypoints" / "openai"
    module.mkdir(parents=True)
    for parent in (module, module.parent, module.parent.parent):
        (parent / "__init__.py").write_text("")
    (module / "api_server.py").write_text(FAKE_SERVER)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "fake"))
    return tmp_path


def _spec(tmp_path: Path):
    spec = build_config({}).serving_spec(Arm.SPECULATIVE)
    return dataclasses.replace(
        spec, port=_free_port(), compiled_artifacts_path=str(tmp_path / "store" / "sd")
    )


def test_compiles_then_publishes_files_and_marker_last(fake_vllm: Path) -> None:
    spec = _spec(fake_vllm)
    files = precompile.precompile(spec, fake_vllm / "scratch", timeout_s=60, poll_s=0.2)
    assert files == ["model.pt", "weights/tp0.safetensors"]
    store = Path(spec.compiled_artifacts_path)
    assert (store / "weights" / "tp0.safetensors").read_bytes() == b"w" * 1000
    marker = read_marker(store)
    assert marker["fingerprint"] == compile_fingerprint(spec)
    assert precompile.artifacts_ready(spec) is True


def test_if_missing_skips_when_ready_and_refuses_partial(fake_vllm: Path) -> None:
    spec = _spec(fake_vllm)
    store = Path(spec.compiled_artifacts_path)
    store.mkdir(parents=True)
    (store / "model.pt").write_bytes(b"half")
    with pytest.raises(SpecError, match="did not finish"):
        precompile.artifacts_ready(spec)
    with pytest.raises(SpecError, match="delete that prefix"):
        precompile.precompile(spec, fake_vllm / "scratch", timeout_s=60, poll_s=0.2)


def test_server_failure_is_reported_not_hung(fake_vllm: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("FAKE_FAIL", "1")
    spec = _spec(fake_vllm)
    spec_file = fake_vllm / "spec.json"
    spec_file.write_text(spec.to_json())
    args = ["--spec", str(spec_file), "--scratch", str(fake_vllm / "s"), "--timeout-s", "30"]
    assert precompile.main(args) == precompile.EXIT_COMPILE_FAILED
    assert "exited with code 7" in capsys.readouterr().err
    assert not Path(spec.compiled_artifacts_path).exists()


def test_timeout_is_enforced(fake_vllm: Path) -> None:
    spec = _spec(fake_vllm)
    # A server that never answers: point the health check at a port nobody listens on.
    silent = dataclasses.replace(spec, port=_free_port())
    (fake_vllm / "fake" / "vllm" / "entrypoints" / "openai" / "api_server.py").write_text(
        "import time\ntime.sleep(600)\n"
    )
    with pytest.raises(TimeoutError):
        precompile.precompile(silent, fake_vllm / "scratch", timeout_s=1.5, poll_s=0.2)


def test_marker_lists_files(fake_vllm: Path) -> None:
    spec = _spec(fake_vllm)
    precompile.precompile(spec, fake_vllm / "scratch", timeout_s=60, poll_s=0.2)
    text = (Path(spec.compiled_artifacts_path) / MARKER_NAME).read_text()
    assert json.loads(text)["files"] == ["model.pt", "weights/tp0.safetensors"]
