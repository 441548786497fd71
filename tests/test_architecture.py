"""The import graph of the first-party packages: no cycles, and only the allowed arrows.

Every import counts, including the ones inside functions: a lazy import hides a cycle from
the interpreter, not from the design.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Which first-party packages each package may import (besides itself). Arrows point down:
# runtime runs inside the serving container and imports nothing of ours.
ALLOWED: dict[str, set[str]] = {
    "runtime": set(),
    "experiment": {"runtime"},
    "guardrails": {"experiment", "runtime"},  # the rules, rendered by charts/stacks/local_run
    "charts": {"experiment", "runtime", "guardrails"},
    "stacks": {"charts", "experiment", "runtime", "guardrails"},
    "loadtest": {"experiment", "guardrails"},
    "local_run": {"loadtest", "experiment", "runtime", "guardrails"},
    # local_run: the drill and the miniature start its servers, gateway and Prometheus;
    # the figures and the CLI describe the machine with it (local_run/machine.py);
    # guardrails: the drill reads the analysis' outcome (guardrails/argo.py Outcome).
    # tune, runtime: the adaptive-k sweep takes the tuning's schedule and renders its servers
    "bench": {"loadtest", "local_run", "experiment", "guardrails", "tune", "runtime"},
    "tune": {"loadtest", "local_run", "experiment", "runtime"},
    # the checks after a deploy look up what charts rendered and guardrails watch; --local,
    # what local_run lays out (its rule file, the rules without the probe's)
    "deploy_check": {"charts", "experiment", "guardrails", "runtime", "local_run"},
}
# Entry points that offer a downstream package's command under an upstream package's name
# (``python -m experiment check``). Nothing imports a ``__main__``, so its imports cannot
# close a cycle (the cycle test still covers them); the library modules keep their arrows.
ENTRY_POINTS_ALLOWED: dict[str, set[str]] = {"experiment.__main__": {"deploy_check"}}


def packages() -> list[str]:
    """Every top-level package of the repository (a directory with an __init__.py)."""
    return sorted(
        p.parent.name
        for p in ROOT.glob("*/__init__.py")
        if not p.parent.name.startswith(".") and p.parent.name != "tests"
    )


def modules() -> dict[str, Path]:
    found = {}
    for package in packages():
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _imported(
    node: ast.AST, module: str, is_package: bool, known: dict[str, Path]
) -> Iterator[str]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
    elif isinstance(node, ast.ImportFrom):
        if node.level:  # relative: resolve against this module's package
            base = module.split(".")
            base = base if is_package else base[:-1]
            base = base[: len(base) - (node.level - 1)]
            target = ".".join([*base, node.module] if node.module else base)
        else:
            target = node.module or ""
        for alias in node.names:
            submodule = f"{target}.{alias.name}"
            yield submodule if submodule in known else target


def import_graph() -> dict[str, set[str]]:
    """module -> the first-party modules it imports (by name)."""
    known = modules()
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        is_package = path.name == "__init__.py"
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for target in _imported(node, name, is_package, known):
                # `import a.b.c` names a.b.c; the nearest known module is the dependency.
                while target and target not in known:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    targets.add(target)
        graph[name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph.get(node, ())):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_package_has_declared_arrows() -> None:
    undeclared = set(packages()) - set(ALLOWED)
    assert not undeclared, f"declare which packages these may import in ALLOWED: {undeclared}"


def test_no_module_imports_a_module_that_imports_it_back() -> None:
    assert cycles(import_graph()) == []


def test_packages_import_only_the_allowed_packages() -> None:
    wrong = sorted(
        f"{module} imports {target}"
        for module, targets in import_graph().items()
        for target in targets
        if (source := module.split(".")[0]) != (package := target.split(".")[0])
        and package not in ALLOWED.get(source, set())
        and package not in ENTRY_POINTS_ALLOWED.get(module, set())
    )
    assert wrong == []


def test_the_checks_can_fail() -> None:
    # The detectors themselves, on a made-up graph: a three-module cycle and a wrong arrow.
    graph = {"a.x": {"a.y"}, "a.y": {"a.z"}, "a.z": {"a.x"}, "a.w": {"a.x"}}
    assert cycles(graph) == [["a.x", "a.y", "a.z"]]
    tree = ast.parse("from . import y\nfrom .z import q\nimport runtime.spec\n")
    known = {"a.y": ROOT, "a.z": ROOT}
    names = [t for node in ast.walk(tree) for t in _imported(node, "a.x", False, known)]
    assert sorted(names) == ["a.y", "a.z", "runtime.spec"]


# One way to start a background process that dies with us, to stop a process group and to
# GET a URL (loadtest/processes.py), so a fix to one (a child outliving a SIGKILLed parent, a
# lingering child, a missed SIGKILL, a read that hangs) reaches every caller. runtime runs
# inside the serving container and may import nothing of ours: it keeps its own.
PROCESS_HELPERS = "loadtest.processes"
OWN_HELPERS_ALLOWED = {"runtime"}
# Modules allowed their own copy of a helper call, each with its reason.
OWN_CALLS_ALLOWED = {
    # experiment may import only runtime, and a pin that cannot be resolved must report the
    # HTTP status and read headers, which http_get drops.
    "experiment.pins.resolve": {"urlopen"},
}
HELPER_CALLS = {"killpg", "urlopen", "terminate", "kill", "prctl"}


def helper_calls(tree: ast.AST) -> list[str]:
    """The calls in ``tree`` that re-implement a helper of loadtest/processes.py."""
    return sorted(
        f"{node.func.attr} (line {node.lineno})"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in HELPER_CALLS
    )


def test_one_copy_of_the_process_and_http_helpers() -> None:
    copies = {
        name: found
        for name, path in modules().items()
        if name != PROCESS_HELPERS and name.split(".")[0] not in OWN_HELPERS_ALLOWED
        if (
            found := [
                call
                for call in helper_calls(ast.parse(path.read_text(), str(path)))
                if call.split(" ")[0] not in OWN_CALLS_ALLOWED.get(name, set())
            ]
        )
    }
    assert copies == {}, (
        f"use loadtest/processes.py (start_group, stop_groups, http_get) instead: {copies}"
    )


def test_the_helper_check_can_fail() -> None:
    tree = ast.parse(
        "os.killpg(p.pid, 9)\nprocess.terminate()\nurllib.request.urlopen(u)\nlibc.prctl(1, 15)\n"
    )
    assert helper_calls(tree) == [
        "killpg (line 1)", "prctl (line 4)", "terminate (line 2)", "urlopen (line 3)"
    ]  # fmt: skip
