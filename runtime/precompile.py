"""Precompile entrypoint: compile an arm once and publish the artifacts to the model store.

    python3 -m runtime.precompile --spec /etc/vllm-spec/spec.json --scratch /scratch \
        --timeout-s 14400

It compiles through the very command ``serve`` runs (same renderer, same flags), so the
artifacts match what serving loads. vLLM compiles into a local scratch directory because
Mountpoint for S3 only writes new files sequentially; once the server reports healthy the
files are copied to the S3-backed ``compiled_artifacts_path`` one by one, and the marker
(with the compile fingerprint) is written last. Bounded by ``--timeout-s``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from runtime.artifacts import MARKER_NAME, marker_payload, read_marker
from runtime.render import render
from runtime.serve import EXIT_BAD_INPUT, check_artifacts, describe, load_spec
from runtime.spec import Generation, ServingSpec
from runtime.validate import SpecError

EXIT_COMPILE_FAILED = 3
HEALTH_POLL_S = 10.0
STOP_GRACE_S = 60.0


def _existing_files(directory: Path) -> list[str]:
    if not directory.is_dir():
        return []
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


def _wait_healthy(process: subprocess.Popen, url: str, deadline: float, poll_s: float) -> None:
    while time.monotonic() < deadline:
        code = process.poll()
        if code is not None:
            raise RuntimeError(f"vLLM exited with code {code} before becoming healthy")
        try:
            with urllib.request.urlopen(url, timeout=poll_s) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(poll_s)
    raise TimeoutError(f"vLLM did not become healthy at {url} before the timeout")


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def publish(scratch: Path, destination: Path, spec: ServingSpec) -> list[str]:
    """Copy the compiled files sequentially (Mountpoint-safe), then write the marker."""
    files = _existing_files(scratch)
    if not files:
        raise RuntimeError(f"vLLM wrote no artifacts into {scratch}")
    for relative in files:
        target = destination / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(scratch / relative, target)
    (destination / MARKER_NAME).write_text(marker_payload(spec, files))
    return files


def artifacts_ready(spec: ServingSpec) -> bool:
    """True if matching artifacts are published; SpecError if something else is there."""
    destination = Path(spec.compiled_artifacts_path or "")
    if read_marker(destination) is not None:
        check_artifacts(spec)  # raises with what to do if the fingerprint differs
        return True
    partial = _existing_files(destination)
    if partial:
        raise SpecError(
            f"{destination} holds {len(partial)} files but no {MARKER_NAME}: an earlier "
            "publish did not finish; delete that prefix in the bucket and start again"
        )
    return False


def precompile(
    spec: ServingSpec, scratch: Path, timeout_s: float, poll_s: float = HEALTH_POLL_S
) -> list[str]:
    if spec.generation == Generation.LOCAL_CPU:
        raise SpecError("precompilation is for Neuron generations; CPU runs compile nothing")
    destination = Path(spec.compiled_artifacts_path or "")
    already = _existing_files(destination)
    if already:
        raise SpecError(
            f"{destination} already holds {len(already)} files; delete that prefix in the "
            "bucket to recompile (the store is never overwritten in place)"
        )
    scratch.mkdir(parents=True, exist_ok=True)
    # Only the artifacts location differs from serving; it is not part of the fingerprint.
    compile_spec = dataclasses.replace(spec, compiled_artifacts_path=str(scratch))
    command = render(compile_spec)
    python = sys.executable or "python3"
    print(f"runtime.precompile: {spec.service_name}: {describe(command, python)}", flush=True)
    process = subprocess.Popen(command.argv(python), env={**os.environ, **command.env})
    try:
        health = f"http://127.0.0.1:{spec.port}/health"
        _wait_healthy(process, health, time.monotonic() + timeout_s, poll_s)
    finally:
        _stop(process)
    files = publish(scratch, destination, spec)
    print(f"runtime.precompile: published {len(files)} files to {destination}", flush=True)
    return files


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m runtime.precompile", description=__doc__)
    parser.add_argument("--spec", required=True, help="path of the ServingSpec JSON")
    parser.add_argument("--scratch", required=True, help="local directory vLLM compiles into")
    parser.add_argument("--timeout-s", type=float, required=True, help="give up after this")
    parser.add_argument(
        "--if-missing",
        action="store_true",
        help="exit 0 at once when matching artifacts are already published (init container)",
    )
    options = parser.parse_args(argv)
    try:
        spec = load_spec(options.spec)
        if options.if_missing and artifacts_ready(spec):
            print(f"runtime.precompile: {spec.compiled_artifacts_path} is ready", flush=True)
            return 0
        precompile(spec, Path(options.scratch), options.timeout_s)
    except SpecError as err:
        print(f"runtime.precompile: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (RuntimeError, TimeoutError, OSError) as err:
        print(f"runtime.precompile: compilation failed: {err}", file=sys.stderr)
        return EXIT_COMPILE_FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main())
