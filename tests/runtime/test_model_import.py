"""runtime.model_import against a fake hub on 127.0.0.1 (the hub's documented HTTP API).

The fake serves the three endpoints the importer uses, pages the tree listing with a
``Link: rel="next"`` header, and sends file downloads through a redirect to another host name
(``localhost``), like the hub's CDN, so the token's scope can be checked.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from runtime import model_import
from runtime.model_import import MARKER_NAME, HubImportError, main, run_import

# A fake hub / fake server on 127.0.0.1: out of the fast tier.
pytestmark = pytest.mark.process

COMMIT = "a" * 40
NEW_COMMIT = "b" * 40
TOKEN = "hf_test_token"


def _git_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


@dataclass
class FakeHub:
    """Repositories: model id -> path -> content; LFS for files of 64 bytes or more."""

    repos: dict[str, dict[str, bytes]]
    commit: str = COMMIT
    require_token: bool = False
    page_size: int = 2
    corrupt: set[str] = field(default_factory=set)  # paths served with flipped bytes
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)  # host, path, auth
    port: int = 0

    def entry(self, path: str, data: bytes) -> dict:
        item = {"type": "file", "path": path, "size": len(data), "oid": _git_sha1(data)}
        if len(data) >= 64:
            item["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data)}
        return item

    def tree(self, model: str) -> list[dict]:
        files = [self.entry(p, d) for p, d in sorted(self.repos[model].items())]
        folders = {p.rsplit("/", 1)[0] for p in self.repos[model] if "/" in p}
        return [{"type": "directory", "path": f, "oid": "0" * 40} for f in folders] + files


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # quiet test output
            pass

        def _send(self, code: int, body: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(code)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            auth = self.headers.get("Authorization")
            hub.requests.append((self.headers.get("Host", ""), url.path, auth))
            parts = [unquote(p) for p in url.path.strip("/").split("/")]
            if hub.require_token and auth != f"Bearer {TOKEN}" and parts[0] != "cdn":
                return self._send(401, b"{}")
            if parts[:2] == ["api", "models"] and parts[4] == "revision":
                model = "/".join(parts[2:4])
                return self._send(200, json.dumps({"id": model, "sha": hub.commit}).encode())
            if parts[:2] == ["api", "models"] and parts[4] == "tree":
                model = "/".join(parts[2:4])
                assert parts[5] == hub.commit and parse_qs(url.query)["recursive"] == ["true"]
                start = int(parse_qs(url.query).get("cursor", ["0"])[0])
                items = hub.tree(model)
                page = items[start : start + hub.page_size]
                headers = {}
                if start + hub.page_size < len(items):
                    nxt = f"http://127.0.0.1:{hub.port}{url.path}?recursive=true&cursor="
                    headers["Link"] = f'<{nxt}{start + hub.page_size}>; rel="next"'
                return self._send(200, json.dumps(page).encode(), headers)
            if len(parts) > 3 and parts[2] == "resolve":
                model, path = "/".join(parts[:2]), "/".join(parts[4:])
                assert parts[3] == hub.commit
                cdn = f"http://localhost:{hub.port}/cdn/{model}/{path}"
                return self._send(302, b"", {"Location": cdn})
            if parts[0] == "cdn":
                model, path = "/".join(parts[1:3]), "/".join(parts[3:])
                data = hub.repos[model][path]
                if path in hub.corrupt:
                    data = bytes(b ^ 0xFF for b in data)
                return self._send(200, data)
            return self._send(404, b"")

    return Handler


@pytest.fixture
def hub() -> Iterator[FakeHub]:
    fake = FakeHub(
        repos={
            "Org/Target": {
                "config.json": b'{"model_type": "qwen3"}',
                "model-00001-of-00002.safetensors": bytes(range(256)) * 40,
                "model-00002-of-00002.safetensors": b"\x01" * 5000,
                "tokenizer/tokenizer.json": b'{"version": "1.0"}',
            },
            "Org/Draft": {"config.json": b"{}", "model.safetensors": b"\x02" * 300},
        }
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    fake.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield fake
    server.shutdown()
    server.server_close()


def _endpoint(hub: FakeHub) -> str:
    return f"http://127.0.0.1:{hub.port}"


def _downloads(hub: FakeHub) -> list[str]:
    return [path for _, path, _ in hub.requests if path.startswith("/cdn/")]


def test_imports_every_file_verified_with_a_marker_written_last(hub, tmp_path) -> None:
    run_import(_endpoint(hub), tmp_path, ["Org/Target", "Org/Draft@main"], 60, log=lambda _: None)
    for model, files in hub.repos.items():
        for path, data in files.items():
            assert (tmp_path / model / path).read_bytes() == data
        marker = json.loads((tmp_path / model / MARKER_NAME).read_text())
        assert marker["commit"] == COMMIT and marker["revision"] == "main"
        assert set(marker["files"]) == set(files)  # directories are not files
    shard = json.loads((tmp_path / "Org/Target" / MARKER_NAME).read_text())["files"]
    big = hub.repos["Org/Target"]["model-00002-of-00002.safetensors"]
    assert shard["model-00002-of-00002.safetensors"] == {
        "size": len(big),
        "sha256": hashlib.sha256(big).hexdigest(),
    }
    assert shard["config.json"]["git_sha1"] == _git_sha1(b'{"model_type": "qwen3"}')
    # The tree listing was paged (4 files + 1 folder, 2 per page) and every page followed.
    tree_pages = [p for _, p, _ in hub.requests if p.startswith("/api/models/Org/Target/tree/")]
    assert len(tree_pages) == 3


def test_a_second_run_fetches_nothing(hub, tmp_path) -> None:
    run_import(_endpoint(hub), tmp_path, ["Org/Target"], 60, log=lambda _: None)
    first = len(_downloads(hub))
    messages: list[str] = []
    run_import(_endpoint(hub), tmp_path, ["Org/Target"], 60, log=messages.append)
    assert len(_downloads(hub)) == first == 4
    assert messages == [f"Org/Target@main: already imported at {COMMIT}"]


def test_a_pinned_commit_already_there_needs_no_hub(hub, tmp_path) -> None:
    run_import(_endpoint(hub), tmp_path, [f"Org/Draft@{COMMIT}"], 60, log=lambda _: None)
    hub.requests.clear()
    run_import("http://127.0.0.1:9", tmp_path, [f"Org/Draft@{COMMIT}"], 60, log=lambda _: None)
    assert hub.requests == []


def test_a_damaged_file_of_the_right_size_is_replaced_and_good_ones_kept(hub, tmp_path) -> None:
    run_import(_endpoint(hub), tmp_path, ["Org/Target"], 60, log=lambda _: None)
    shard = tmp_path / "Org/Target/model-00002-of-00002.safetensors"
    shard.write_bytes(b"\x00" * shard.stat().st_size)  # same size, wrong content
    hub.commit = NEW_COMMIT  # the revision moved: the marker no longer matches
    hub.requests.clear()
    messages: list[str] = []
    run_import(_endpoint(hub), tmp_path, ["Org/Target"], 60, log=messages.append)
    assert _downloads(hub) == ["/cdn/Org/Target/model-00002-of-00002.safetensors"]
    assert shard.read_bytes() == hub.repos["Org/Target"]["model-00002-of-00002.safetensors"]
    assert messages[-1] == f"Org/Target@main: 1 files fetched, 3 kept, commit {NEW_COMMIT}"
    assert json.loads((shard.parent / MARKER_NAME).read_text())["commit"] == NEW_COMMIT


def test_a_download_whose_hash_differs_is_deleted_and_no_marker_is_written(hub, tmp_path) -> None:
    hub.corrupt.add("model.safetensors")
    with pytest.raises(HubImportError, match="hash differs"):
        run_import(_endpoint(hub), tmp_path, ["Org/Draft"], 60, log=lambda _: None)
    assert not (tmp_path / "Org/Draft/model.safetensors").exists()
    assert not (tmp_path / "Org/Draft" / MARKER_NAME).exists()


def test_the_token_goes_to_the_hub_never_to_the_redirect_host(hub, tmp_path) -> None:
    hub.require_token = True
    run_import(_endpoint(hub), tmp_path, ["Org/Draft"], 60, token=TOKEN, log=lambda _: None)
    hub_calls = [auth for host, path, auth in hub.requests if not path.startswith("/cdn/")]
    cdn_calls = [(host, auth) for host, path, auth in hub.requests if path.startswith("/cdn/")]
    assert hub_calls and all(auth == f"Bearer {TOKEN}" for auth in hub_calls)
    assert cdn_calls and all(
        host.startswith("localhost") and auth is None for host, auth in cdn_calls
    )


def test_a_gated_model_without_a_token_names_the_setting(hub, tmp_path) -> None:
    hub.require_token = True
    with pytest.raises(HubImportError, match=r"model_store\.hub_token_secret"):
        run_import(_endpoint(hub), tmp_path, ["Org/Draft"], 60, log=lambda _: None)


def test_a_path_outside_the_model_directory_is_refused(hub, tmp_path) -> None:
    hub.repos["Org/Draft"]["../../escape.txt"] = b"x"
    with pytest.raises(HubImportError, match="outside the model directory"):
        run_import(_endpoint(hub), tmp_path, ["Org/Draft"], 60, log=lambda _: None)
    assert not (tmp_path.parent / "escape.txt").exists()


def test_a_bad_model_id_is_refused_before_any_request(hub, tmp_path) -> None:
    with pytest.raises(HubImportError, match="not a hub id"):
        run_import(_endpoint(hub), tmp_path, ["not-an-id"], 60, log=lambda _: None)
    assert hub.requests == []


def test_the_deadline_bounds_an_import_and_leaves_no_partial_file(hub, tmp_path) -> None:
    with pytest.raises(TimeoutError):
        run_import(_endpoint(hub), tmp_path, ["Org/Target"], -1, log=lambda _: None)
    model_dir = tmp_path / "Org/Target"
    assert not [p for p in model_dir.rglob("*") if p.is_file()]


def _spec(tmp_path: Path, draft: bool) -> Path:
    spec = {
        "target_model": str(tmp_path / "store/Org/Target"),
        "draft_model": str(tmp_path / "store/Org/Draft") if draft else None,
    }
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return path


def test_wait_returns_once_the_specs_models_are_imported(hub, tmp_path) -> None:
    run_import(_endpoint(hub), tmp_path / "store", ["Org/Target"], 60, log=lambda _: None)
    # The baseline arm (no draft) has what it needs; the speculative arm does not yet.
    assert main(["wait", "--spec", str(_spec(tmp_path, False)), "--timeout-s", "0"]) == 0
    assert main(["wait", "--spec", str(_spec(tmp_path, True)), "--timeout-s", "0"]) == 3
    run_import(_endpoint(hub), tmp_path / "store", ["Org/Draft"], 60, log=lambda _: None)
    assert main(["wait", "--spec", str(_spec(tmp_path, True)), "--timeout-s", "0"]) == 0


def test_wait_does_not_accept_a_marker_whose_files_are_missing(hub, tmp_path, capsys) -> None:
    run_import(_endpoint(hub), tmp_path / "store", ["Org/Target"], 60, log=lambda _: None)
    (tmp_path / "store/Org/Target/config.json").unlink()
    assert main(["wait", "--spec", str(_spec(tmp_path, False)), "--timeout-s", "0"]) == 3
    assert "model-import Job" in capsys.readouterr().err


def test_wait_polls_until_the_import_lands(hub, tmp_path, monkeypatch) -> None:
    sleeps: list[float] = []
    # time.sleep is patched on the time module itself: other threads (the hub's server, a
    # former test's lingering reader) sleep through it too. Only this thread's wait counts.
    waiting, real_sleep = threading.current_thread(), model_import.time.sleep

    def import_while_sleeping(seconds: float) -> None:
        if threading.current_thread() is not waiting:
            real_sleep(seconds)
            return
        sleeps.append(seconds)
        run_import(_endpoint(hub), tmp_path / "store", ["Org/Target"], 60, log=lambda _: None)

    monkeypatch.setattr(model_import.time, "sleep", import_while_sleeping)
    spec = str(_spec(tmp_path, False))
    assert main(["wait", "--spec", spec, "--timeout-s", "600", "--poll-s", "7"]) == 0
    assert sleeps == [7.0]


def test_cli_import_reads_an_optional_token_file(hub, tmp_path) -> None:
    hub.require_token = True
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    argv = ["import", "--endpoint", _endpoint(hub), "--dest", str(tmp_path / "store"),
            "--model", "Org/Draft", "--timeout-s", "60"]  # fmt: skip
    assert main([*argv, "--token-file", str(token_file)]) == 0
    # The Secret is optional: without the file the import goes on, tokenless (here refused).
    hub.commit = NEW_COMMIT
    assert main([*argv, "--token-file", str(tmp_path / "absent")]) == 3
