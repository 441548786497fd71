"""Import checkpoints from the model hub into the model store, and wait for them.

    python3 -m runtime.model_import import --endpoint https://huggingface.co \
        --dest /checkpoints --model Qwen/Qwen3-32B --model Qwen/Qwen3-1.7B@main \
        [--token-file /var/run/secrets/hub/token] --timeout-s 10800
    python3 -m runtime.model_import wait --spec /etc/specdecode/spec.json --timeout-s 10800

``import`` runs in the model-import Job (``charts/model_import_job.py``) with ``--dest`` on the
S3-backed volume whose prefix is ``checkpoints/``: each model lands under
``checkpoints/<id>/``. ``wait`` is the serving pods' first init container: it returns once
every model directory of the arm's spec holds a finished import, as ``precompile --if-missing``
does for compiled artifacts.

The hub's HTTP API, as huggingface_hub (huggingface/huggingface_hub) calls it:
- ``GET {endpoint}/api/models/{id}/revision/{revision}`` -> ``{"sha": <commit>, ...}``
  (``src/huggingface_hub/hf_api.py``, ``HfApi.model_info``): the revision is resolved once, so
  every file comes from the same commit;
- ``GET {endpoint}/api/models/{id}/tree/{commit}?recursive=true`` -> a JSON list of
  ``{"type": "file"|"directory", "path", "size", "oid", "lfs": {"oid", "size"}}``, paged with
  a ``Link: <...>; rel="next"`` header (``hf_api.py``, ``HfApi._iter_repo_tree_pages`` and
  ``RepoFile``; ``utils/_pagination.py``). ``lfs.oid`` is the file's sha256; ``oid`` of a
  non-LFS file is its git blob hash, sha1 of ``b"blob <size>\\0" + content``
  (``utils/sha.py``, ``git_hash``);
- ``GET {endpoint}/{id}/resolve/{commit}/{path}`` -> the file, usually through a redirect to
  a CDN (``constants.py``, ``HUGGINGFACE_CO_URL_TEMPLATE``);
- ``Authorization: Bearer <token>`` for gated or private models (``utils/_headers.py``). The
  token is never sent to a redirect's other host.

Idempotent: a model whose marker (written last) names the same commit and whose files have the
recorded sizes is skipped; a file already there with the right size and hash is kept; anything
else is replaced. Mountpoint for S3 writes new files sequentially and uploads them on close, so
every file is streamed once, front to back, and hashed on the way. Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.client import HTTPMessage
from pathlib import Path
from typing import IO, Any

MARKER_NAME = ".imported.json"
DEFAULT_REVISION = "main"
CHUNK_BYTES = 8 * 1024 * 1024
REQUEST_TIMEOUT_S = 60.0
WAIT_POLL_S = 30.0
EXIT_BAD_INPUT = 2
EXIT_IMPORT_FAILED = 3
# Hub ids are "<owner>/<name>" (letters, digits, '-', '_', '.').
_MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
_NEXT_LINK = re.compile(r'<([^>]+)>\s*;\s*rel="next"')


class HubImportError(RuntimeError):
    """An import that cannot finish as asked; the message says what to change."""


@dataclass(frozen=True)
class RemoteFile:
    """One file of a model at a commit: where it goes, its size and how to check it."""

    path: str
    size: int
    sha256: str | None  # LFS files
    git_sha1: str | None  # other files: the git blob hash

    def check(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"size": self.size}
        if self.sha256:
            entry["sha256"] = self.sha256
        else:
            entry["git_sha1"] = self.git_sha1
        return entry


def parse_model(text: str) -> tuple[str, str]:
    """``owner/name`` or ``owner/name@revision`` -> (id, revision)."""
    model, _, revision = text.partition("@")
    if not _MODEL_ID.fullmatch(model):
        raise HubImportError(
            f"model {text!r} is not a hub id like 'Qwen/Qwen3-32B' (optionally '@<revision>')"
        )
    return model, revision or DEFAULT_REVISION


class _NoTokenAcrossHosts(urllib.request.HTTPRedirectHandler):
    """Follow redirects, but never carry the hub token to another host (the CDN)."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if (
            new is not None
            and urllib.parse.urlsplit(newurl).netloc != urllib.parse.urlsplit(req.full_url).netloc
        ):
            new.remove_header("Authorization")
        return new


class Hub:
    """The few hub endpoints the import needs."""

    def __init__(self, endpoint: str, token: str | None = None) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.token = token
        self._opener = urllib.request.build_opener(_NoTokenAcrossHosts())

    def _open(self, url: str) -> Any:
        request = urllib.request.Request(url, headers={"User-Agent": "specdecode-model-import"})
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            return self._opener.open(request, timeout=REQUEST_TIMEOUT_S)
        except urllib.error.HTTPError as err:
            hint = (
                "; the model may be gated or private: put a hub token in the Secret named by "
                "model_store.hub_token_secret (key 'token')"
                if err.code in (401, 403)
                else ""
            )
            raise HubImportError(f"GET {url}: HTTP {err.code} {err.reason}{hint}") from None
        except (urllib.error.URLError, OSError) as err:
            raise HubImportError(f"GET {url}: {err}") from None

    def _json(self, url: str) -> tuple[Any, str | None]:
        with self._open(url) as response:
            body = json.loads(response.read())
            match = _NEXT_LINK.search(response.headers.get("Link", ""))
        return body, match.group(1) if match else None

    def commit(self, model: str, revision: str) -> str:
        quoted = urllib.parse.quote(revision, safe="")
        info, _ = self._json(f"{self.endpoint}/api/models/{model}/revision/{quoted}")
        sha = info.get("sha") if isinstance(info, dict) else None
        if not isinstance(sha, str) or not sha:
            raise HubImportError(f"{model}@{revision}: the hub's answer names no commit ('sha')")
        return sha

    def files(self, model: str, commit: str) -> list[RemoteFile]:
        url: str | None = f"{self.endpoint}/api/models/{model}/tree/{commit}?recursive=true"
        found: list[RemoteFile] = []
        while url:
            page, url = self._json(url)
            for item in page:
                if item.get("type") != "file":
                    continue
                lfs = item.get("lfs") or {}
                found.append(
                    RemoteFile(
                        path=item["path"],
                        size=int(item["size"]),
                        sha256=lfs.get("oid"),
                        git_sha1=None if lfs else item.get("oid"),
                    )
                )
        if not found:
            raise HubImportError(f"{model}@{commit}: the hub lists no files")
        return found

    def download(self, model: str, commit: str, path: str) -> Any:
        quoted = urllib.parse.quote(path)
        return self._open(f"{self.endpoint}/{model}/resolve/{commit}/{quoted}")


class _Digest:
    """sha256 of the content, or git's blob sha1 (its header needs the size up front)."""

    def __init__(self, file: RemoteFile) -> None:
        if file.sha256:
            self._hash = hashlib.sha256()
            self.expected = file.sha256
        else:
            self._hash = hashlib.sha1(usedforsecurity=False)
            self._hash.update(f"blob {file.size}\0".encode())
            self.expected = file.git_sha1 or ""

    def update(self, data: bytes) -> None:
        self._hash.update(data)

    def matches(self) -> bool:
        return self._hash.hexdigest() == self.expected


def _safe_target(root: Path, relative: str) -> Path:
    target = (root / relative).resolve()
    if not target.is_relative_to(root.resolve()):
        raise HubImportError(f"the hub lists a path outside the model directory: {relative!r}")
    return target


def _verified(target: Path, file: RemoteFile, deadline: float) -> bool:
    """True if ``target`` already holds exactly this file (size first: cheap on S3)."""
    try:
        if target.stat().st_size != file.size:
            return False
    except FileNotFoundError:
        return False
    digest = _Digest(file)
    with target.open("rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            _check_deadline(deadline)
            digest.update(chunk)
    return digest.matches()


def _check_deadline(deadline: float) -> None:
    if time.monotonic() > deadline:
        raise TimeoutError("the import did not finish before --timeout-s")


def _fetch(
    hub: Hub, model: str, commit: str, file: RemoteFile, target: Path, deadline: float
) -> None:
    """Stream one file to ``target`` (new file, written front to back), verifying it. Opened
    like shutil.copyfile opens (``wb``), as precompile's publish already does on Mountpoint."""
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = _Digest(file)
    written = 0
    try:
        with hub.download(model, commit, file.path) as response, target.open("wb") as out:
            while chunk := response.read(CHUNK_BYTES):
                _check_deadline(deadline)
                out.write(chunk)
                digest.update(chunk)
                written += len(chunk)
    except BaseException:
        # Mountpoint uploads whatever was written on close: leave no partial object behind.
        target.unlink(missing_ok=True)
        raise
    if written != file.size or not digest.matches():
        target.unlink()
        raise HubImportError(
            f"{model}/{file.path}: got {written} bytes, expected {file.size}, or its hash "
            "differs from the hub's; the partial file was deleted, run the import again"
        )


def read_marker(directory: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((directory / MARKER_NAME).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def marker_complete(directory: Path, marker: dict[str, Any] | None) -> bool:
    """The marker exists and every file it lists is there with its recorded size."""
    if marker is None or not isinstance(marker.get("files"), dict):
        return False
    for relative, entry in marker["files"].items():
        try:
            if (directory / relative).stat().st_size != entry.get("size"):
                return False
        except OSError:
            return False
    return True


def import_model(
    hub: Hub,
    model: str,
    revision: str,
    dest: Path,
    deadline: float,
    log: Callable[[str], None] = print,
) -> str:
    """Import one model into ``dest/<model>``; returns what was done, for the log."""
    directory = dest / model
    marker = read_marker(directory)
    imported = marker.get("commit") if marker and marker_complete(directory, marker) else None
    if imported is not None and imported == revision:
        # Pinned to a commit that is already there: nothing to ask the hub.
        return f"{model}@{revision}: already imported"
    commit = hub.commit(model, revision)
    if imported == commit:
        return f"{model}@{revision}: already imported at {commit}"
    files = hub.files(model, commit)
    marker_path = directory / MARKER_NAME
    if marker_path.exists():
        # Serving waits for a complete marker: none while files change. The store is
        # written by new files only (no overwrite), so the old one is deleted.
        marker_path.unlink()
    fetched = kept = 0
    for file in files:
        target = _safe_target(directory, file.path)
        if _verified(target, file, deadline):
            kept += 1
            continue
        if target.exists():
            target.unlink()  # an earlier attempt's or another commit's file: replace it
        log(f"{model}: {file.path} ({file.size} bytes)")
        _fetch(hub, model, commit, file, target, deadline)
        fetched += 1
    payload = {
        "model": model,
        "revision": revision,
        "commit": commit,
        "files": {file.path: file.check() for file in files},
    }
    marker_path.write_text(json.dumps(payload, indent=2, sort_keys=True))
    return f"{model}@{revision}: {fetched} files fetched, {kept} kept, commit {commit}"


def _token(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        token = Path(path).read_text().strip()
    except FileNotFoundError:
        return None  # the Secret is optional: public models need no token
    return token or None


def run_import(
    endpoint: str,
    dest: Path,
    models: Sequence[str],
    timeout_s: float,
    token: str | None = None,
    log: Callable[[str], None] = print,
) -> None:
    deadline = time.monotonic() + timeout_s
    hub = Hub(endpoint, token)
    for text in models:
        model, revision = parse_model(text)
        log(import_model(hub, model, revision, dest, deadline, log))


def _awaited_directories(spec: dict[str, Any]) -> list[Path]:
    """The spec's model directories in the store (absolute paths; hub ids are not awaited)."""
    paths = [spec.get("target_model"), spec.get("draft_model")]
    return [Path(p) for p in paths if isinstance(p, str) and Path(p).is_absolute()]


def pending(directories: Sequence[Path]) -> list[Path]:
    return [d for d in directories if not marker_complete(d, read_marker(d))]


def wait_for_models(
    directories: Sequence[Path],
    timeout_s: float,
    poll_s: float = WAIT_POLL_S,
    log: Callable[[str], None] = print,
) -> None:
    deadline = time.monotonic() + timeout_s
    while missing := pending(directories):
        if time.monotonic() >= deadline:
            names = ", ".join(str(d) for d in missing)
            raise TimeoutError(
                f"no finished import in {names} after {timeout_s:.0f} s; check the "
                "model-import Job's log (kubectl logs job/<project>-model-import-...)"
            )
        log(f"waiting for the model import: {', '.join(str(d) for d in missing)}")
        time.sleep(poll_s)


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python3 -m runtime.model_import", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("import", help="pull models from the hub into --dest")
    run.add_argument("--endpoint", required=True, help="the hub's base URL")
    run.add_argument("--dest", required=True, help="checkpoints directory (S3-backed)")
    run.add_argument("--model", action="append", required=True, help="id[@revision]; repeat")
    run.add_argument("--token-file", help="file holding a hub token (absent: no token)")
    run.add_argument("--timeout-s", type=float, required=True, help="give up after this")
    wait = commands.add_parser("wait", help="wait until the spec's models are imported")
    wait.add_argument("--spec", required=True, help="path of the ServingSpec JSON")
    wait.add_argument("--timeout-s", type=float, required=True, help="give up after this")
    wait.add_argument("--poll-s", type=float, default=WAIT_POLL_S, help="seconds between looks")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    options = argument_parser().parse_args(argv)

    def log(message: str) -> None:
        print(f"runtime.model_import: {message}", flush=True)

    try:
        if options.command == "import":
            run_import(
                options.endpoint,
                Path(options.dest),
                options.model,
                options.timeout_s,
                _token(options.token_file),
                log,
            )
        else:
            spec = json.loads(Path(options.spec).read_text())
            wait_for_models(_awaited_directories(spec), options.timeout_s, options.poll_s, log)
            log("every model of the spec is imported")
    # TimeoutError is an OSError: it is caught first, as a failed import, not bad input.
    except (HubImportError, TimeoutError) as err:
        print(f"runtime.model_import: {err}", file=sys.stderr)
        return EXIT_IMPORT_FAILED
    except (OSError, ValueError) as err:
        print(f"runtime.model_import: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0


if __name__ == "__main__":
    sys.exit(main())
