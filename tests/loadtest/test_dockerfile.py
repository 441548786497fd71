"""The load-test image (no Docker here): parse the Dockerfile for the essentials."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from experiment import build_config

ROOT = Path(__file__).resolve().parents[2]


def _instructions() -> list[tuple[str, str]]:
    config = build_config({})
    dockerfile = ROOT / config.loadtest.image_directory / "Dockerfile"
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in text.splitlines()
        if line.strip() and not line.startswith("#")
    ]


def test_image_installs_the_loadtest_extra_and_runs_as_non_root() -> None:
    instructions = _instructions()
    runs = " ".join(arg for op, arg in instructions if op == "RUN")
    assert '".[loadtest]"' in runs
    copies = [arg.split()[0] for op, arg in instructions if op == "COPY" and "--from" not in arg]
    for source in ("pyproject.toml", "experiment/", "runtime/", "guardrails/", "loadtest/"):
        assert source in copies, source
    # every COPY source exists relative to the build context (the repository root)
    for op, arg in instructions:
        if op == "COPY" and "--from" not in arg:
            for source in arg.split()[:-1]:
                assert (ROOT / source).exists(), source
    users = [arg for op, arg in instructions if op == "USER"]
    assert users and users[-1] not in ("root", "0")
    entrypoint = [arg for op, arg in instructions if op == "ENTRYPOINT"][-1]
    assert entrypoint == '["python", "-m", "loadtest"]'
    froms = [arg for op, arg in instructions if op == "FROM"]
    assert all(re.match(r"python:3\.1[1-9]-slim", f) for f in froms)


def test_every_third_party_import_of_loadtest_is_declared_in_the_extra() -> None:
    import tomllib

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["loadtest"]
    declared = {re.split(r"[<>=\[ ;]", dep)[0].lower().replace("-", "_") for dep in extra}
    base = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    declared |= {re.split(r"[<>=\[ ;]", dep)[0].lower().replace("-", "_") for dep in base}
    aliases = {"yaml": "pyyaml", "botocore": "boto3", "gevent": "locust"}
    local = {"experiment", "runtime", "guardrails", "loadtest"}
    # An import inside a function may come from the `traffic` extra instead: the importer's
    # --tokenizer, which runs on the user's machine, not in the image (loadtest/traffic.py
    # says what to install when it is missing).
    optional = {
        re.split(r"[<>=\[ ;]", dep)[0].lower().replace("-", "_")
        for dep in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
            "optional-dependencies"
        ]["traffic"]
    }
    imported: set[str] = set()
    lazily: set[str] = set()

    def names(node: ast.AST) -> set[str]:
        if isinstance(node, ast.Import):
            return {alias.name.split(".")[0] for alias in node.names}
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            return {node.module.split(".")[0]}
        return set()

    for path in (ROOT / "loadtest").rglob("*.py"):  # subpackages too (loadtest/render/)
        tree = ast.parse(path.read_text())
        in_functions = {
            id(inner)
            for function in ast.walk(tree)
            if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
            for inner in ast.walk(function)
        }
        for node in ast.walk(tree):
            found = names(node)
            if id(node) in in_functions and found <= optional:
                lazily |= found
            else:
                imported |= found
    assert lazily <= optional
    import sys

    third_party = {
        m
        for m in imported
        if m not in sys.stdlib_module_names and m not in local and m != "__future__"
    }
    missing = {m for m in third_party if aliases.get(m, m).lower() not in declared}
    assert not missing, f"imported by loadtest/ but not declared in the loadtest extra: {missing}"
    # The project's own packages it imports are shipped as sources: each one is COPY'd.
    copied = {arg.split()[0].rstrip("/") for op, arg in _instructions() if op == "COPY"}
    own = {m for m in imported if (ROOT / m / "__init__.py").is_file()}
    assert own <= copied, f"imported by loadtest/ but not in the image: {own - copied}"


def test_the_image_ships_no_test_or_bench_instrument() -> None:
    # The image copies whole source directories: the scripted server and other instruments
    # live in bench/ (and tests/), which it never copies.
    sources = {
        source.rstrip("/").split("/")[0]
        for op, arg in _instructions()
        if op == "COPY" and "--from" not in arg
        for source in arg.split()[:-1]
    }
    assert not sources & {"bench", "tests", "."}, sources
    shipped = {path.stem for path in (ROOT / "loadtest").rglob("*.py")}
    assert not shipped & {"scripted_server", "truth_server", "fake_vllm_server"}
