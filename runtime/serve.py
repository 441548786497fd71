"""Container entrypoint: check the spec, the model mount and the artifacts, then exec vLLM.

    python3 -m runtime.serve --spec /etc/vllm-spec/spec.json [--dry-run]

Every check fails with exit code 2 and a message that says what to change, before vLLM
starts (a bad mount otherwise surfaces as an obscure loader traceback hours later). The
exact command is printed so the pod log shows what the arm really ran.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from runtime.artifacts import MARKER_NAME, compile_fingerprint, read_marker
from runtime.render import VllmCommand, render
from runtime.spec import Generation, ServingSpec
from runtime.validate import SpecError, check_dflash_draft, check_draft_compatibility

EXIT_BAD_INPUT = 2


def load_spec(path: str | Path) -> ServingSpec:
    file = Path(path)
    try:
        text = file.read_text()
    except OSError as err:
        raise SpecError(
            f"cannot read the serving spec {str(file)!r} ({err.strerror}); check the "
            "ConfigMap mount and the --spec path"
        ) from None
    try:
        return ServingSpec.from_json(text)
    except (ValueError, TypeError, KeyError) as err:
        raise SpecError(f"serving spec {str(file)!r} is malformed: {err}") from None


def _check_model_dir(role: str, path: str) -> None:
    directory = Path(path)
    if not directory.is_absolute():
        return  # a hub id, resolved by vLLM (local runs only; pods never download)
    if not (directory / "config.json").is_file():
        raise SpecError(
            f"{role} model directory {path} has no config.json; upload the checkpoint to the "
            "model store (see docs/serving.md) or fix the model path in the configuration"
        )


def check_artifacts(spec: ServingSpec) -> None:
    """Refuse to start without matching precompiled artifacts (compiling takes hours)."""
    directory = spec.compiled_artifacts_path
    assert directory is not None  # validate_spec requires it on Neuron
    marker = read_marker(directory)
    if marker is None:
        raise SpecError(
            f"no finished precompiled artifacts in {directory} (missing {MARKER_NAME}); run "
            f"the precompile Job for {spec.service_name} first (see docs/serving.md)"
        )
    expected = compile_fingerprint(spec)
    if marker.get("fingerprint") != expected:
        raise SpecError(
            f"artifacts in {directory} were compiled for different settings (fingerprint "
            f"{marker.get('fingerprint')!r}, this spec needs {expected!r}); delete that prefix "
            "and rerun the precompile Job after changing the configuration"
        )


def preflight(spec: ServingSpec, *, check_files: bool = True) -> tuple[VllmCommand, list[str]]:
    """Render and check everything; returns the command and notes on what was not checked."""
    command = render(spec)
    notes: list[str] = []
    if check_files:
        _check_model_dir("target", spec.target_model)
        if spec.draft_model is not None:
            _check_model_dir("draft", spec.draft_model)
            notes += check_draft_compatibility(spec.target_model, spec.draft_model)
            if spec.speculative_method == "dflash" and spec.num_speculative_tokens is not None:
                notes += check_dflash_draft(spec.draft_model, spec.num_speculative_tokens)
        if spec.generation != Generation.LOCAL_CPU:
            check_artifacts(spec)
    return command, notes


def describe(command: VllmCommand, python: str) -> str:
    env = " ".join(f"{key}={shlex.quote(value)}" for key, value in sorted(command.env.items()))
    return f"{env} {shlex.join(command.argv(python))}".strip()


def main(
    argv: Sequence[str] | None = None,
    exec_fn: Callable[[str, list[str], dict[str, str]], object] = os.execvpe,
) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m runtime.serve", description=__doc__)
    parser.add_argument("--spec", required=True, help="path of the ServingSpec JSON")
    parser.add_argument("--dry-run", action="store_true", help="check and print, do not exec")
    parser.add_argument(
        "--skip-file-checks",
        action="store_true",
        help="do not look at the model mount or artifacts (rendering checks still run)",
    )
    options = parser.parse_args(argv)
    try:
        spec = load_spec(options.spec)
        command, notes = preflight(spec, check_files=not options.skip_file_checks)
    except SpecError as err:
        print(f"runtime.serve: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for note in notes:
        print(f"runtime.serve: note: {note}", file=sys.stderr)
    python = sys.executable or "python3"
    print(f"runtime.serve: {spec.service_name}: {describe(command, python)}", flush=True)
    if options.dry_run:
        return 0
    exec_fn(python, command.argv(python), {**os.environ, **command.env})
    return 0  # only reached when exec_fn is replaced (tests)


if __name__ == "__main__":
    sys.exit(main())
