"""runtime/ runs on the plugin image's Python 3.14 (the SDK 2.33 DLC is Ubuntu 26.04, py314).

No CPython 3.14 can be had from this project's registries (Debian bookworm's apt offers
python3.11 only; PyPI ships no interpreters), so 3.14-cleanness is proven with the tools
that know 3.14 without running it:

- ruff with ``--target-version py314`` (syntax and upgrade rules for 3.14);
- mypy with ``--python-version 3.14``, whose typeshed stubs drop the modules and names
  3.12-3.14 removed (an ``import asyncore`` or ``ast.Num`` fails the check);
- an AST scan for the removals of the documented lists below, which needs no tool at all.

Each check is first shown to fail on a probe that uses removed APIs, so none can pass
vacuously.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from charts.runtime_package import PACKAGE_DIR, package_files

# Modules removed from the standard library in 3.12-3.14.
# python/cpython: Doc/whatsnew/3.12.rst ("Removed": PEP 632 distutils, asynchat, asyncore,
# imp, smtpd) and Doc/whatsnew/3.13.rst ("PEP 594: Remove dead batteries", lib2to3).
REMOVED_MODULES: dict[str, str] = {
    **dict.fromkeys(("asynchat", "asyncore", "distutils", "imp", "smtpd"), "3.12"),
    **dict.fromkeys(
        (
            "aifc", "audioop", "cgi", "cgitb", "chunk", "crypt", "imghdr", "mailcap",
            "msilib", "nis", "nntplib", "ossaudiodev", "pipes", "sndhdr", "spwd", "sunau",
            "telnetlib", "uu", "xdrlib", "lib2to3",
        ),
        "3.13",
    ),
}  # fmt: skip
# Names removed from modules that remain. Doc/whatsnew/3.12.rst "Removed" (configparser,
# locale, ssl, unittest aliases, importlib.find_loader, pkgutil.ImpImporter/ImpLoader),
# Doc/whatsnew/3.13.rst (locale.resetlocale, typing.io/re, unittest.makeSuite/findTestCases/
# getTestCaseNames), Doc/whatsnew/3.14.rst and Doc/deprecations/pending-removal-in-3.14.rst
# (ast node aliases, asyncio child watchers, pkgutil.find_loader/get_loader,
# importlib.abc resource classes, pty.master_open/slave_open, sqlite3.version(_info),
# urllib.parse.Quoter).
REMOVED_NAMES: dict[str, dict[str, str]] = {
    "ast": dict.fromkeys(("Num", "Str", "Bytes", "NameConstant", "Ellipsis"), "3.14"),
    "asyncio": dict.fromkeys(
        (
            "AbstractChildWatcher", "SafeChildWatcher", "FastChildWatcher",
            "MultiLoopChildWatcher", "ThreadedChildWatcher", "PidfdChildWatcher",
            "get_child_watcher", "set_child_watcher",
        ),
        "3.14",
    ),
    "pkgutil": {"find_loader": "3.14", "get_loader": "3.14", "ImpImporter": "3.12",
                "ImpLoader": "3.12"},
    "importlib": {"find_loader": "3.12"},
    "importlib.abc": dict.fromkeys(("ResourceReader", "Traversable", "TraversableResources"),
                                   "3.14"),
    "pty": {"master_open": "3.14", "slave_open": "3.14"},
    "sqlite3": {"version": "3.14", "version_info": "3.14", "enable_shared_cache": "3.12",
                "OptimizedUnicode": "3.12"},
    "urllib.parse": {"Quoter": "3.14"},
    "configparser": {"SafeConfigParser": "3.12", "LegacyInterpolation": "3.13"},
    "locale": {"format": "3.12", "resetlocale": "3.13"},
    "ssl": {"wrap_socket": "3.12", "match_hostname": "3.12", "RAND_pseudo_bytes": "3.12"},
    "io": {"OpenWrapper": "3.12"},
    "typing": {"io": "3.13", "re": "3.13"},
    "unittest": {"makeSuite": "3.13", "findTestCases": "3.13", "getTestCaseNames": "3.13"},
}  # fmt: skip
# TestCase aliases removed in 3.12 (Doc/whatsnew/3.12.rst, unittest).
REMOVED_METHODS = {
    "failUnless", "failIf", "failUnlessEqual", "failIfEqual", "failUnlessAlmostEqual",
    "failIfAlmostEqual", "failUnlessRaises", "assert_", "assertEquals", "assertNotEquals",
    "assertAlmostEquals", "assertNotAlmostEquals", "assertRegexpMatches",
    "assertNotRegexpMatches", "assertRaisesRegexp", "assertDictContainsSubset", "readfp",
}  # fmt: skip


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        parent = _dotted(node.value)
        return f"{parent}.{node.attr}" if parent else None
    return None


def removed_api_uses(source: str) -> list[str]:
    """Every use of a module or name in the removal lists above, as 'line: what (version)'."""
    found: list[str] = []
    # Names bound by `import x.y as z` / `from x import y`, mapped back to what they are.
    aliases: dict[str, str] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                root = alias.name.split(".")[0]
                if root in REMOVED_MODULES:
                    found.append(f"{node.lineno}: import {alias.name} ({REMOVED_MODULES[root]})")
                aliases[alias.asname or root] = alias.name if alias.asname else root
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            root = node.module.split(".")[0]
            if root in REMOVED_MODULES:
                found.append(f"{node.lineno}: from {node.module} ({REMOVED_MODULES[root]})")
            removed = REMOVED_NAMES.get(node.module, {})
            for alias in node.names:
                if alias.name in removed:
                    found.append(
                        f"{node.lineno}: from {node.module} import {alias.name} "
                        f"({removed[alias.name]})"
                    )
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        if node.attr in REMOVED_METHODS:
            found.append(f"{node.lineno}: .{node.attr} (3.12)")
            continue
        dotted = _dotted(node.value)
        if dotted is None:
            continue
        head, _, rest = dotted.partition(".")
        module = ".".join(filter(None, (aliases.get(head, head), rest)))
        if node.attr in REMOVED_NAMES.get(module, {}):
            found.append(
                f"{node.lineno}: {module}.{node.attr} ({REMOVED_NAMES[module][node.attr]})"
            )
    return sorted(set(found))


PROBE = """\
import asyncore
import ast as syntax
import importlib.abc
from pkgutil import find_loader
from cgi import escape
import unittest

x = syntax.Num(1)
importlib.abc.Traversable
class T(unittest.TestCase):
    def test(self):
        self.assertEquals(1, 1)
"""


def test_the_scan_finds_each_kind_of_removed_api() -> None:
    found = removed_api_uses(PROBE)
    text = "\n".join(found)
    for expected in (
        "1: import asyncore (3.12)",
        "4: from pkgutil import find_loader (3.14)",
        "5: from cgi (3.13)",
        "8: ast.Num (3.14)",
        "9: importlib.abc.Traversable (3.14)",
        "12: .assertEquals (3.12)",
    ):
        assert expected in text, f"{expected!r} not found in {found}"


def test_runtime_uses_no_stdlib_api_removed_by_3_14() -> None:
    offenders = {name: removed_api_uses(src) for name, src in package_files().items()}
    assert {name: uses for name, uses in offenders.items() if uses} == {}


def _tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], capture_output=True, text=True, timeout=300, check=False
    )


def _probe(tmp_path: Path) -> Path:
    probe = tmp_path / "probe314.py"
    probe.write_text(PROBE)
    return probe


# PEP 758 (3.14): `except A, B:` without parentheses is valid 3.14 syntax and a syntax
# error before it, so ruff's verdict on it shows which version it really checked against.
PEP_758 = """\
def f() -> int:
    try:
        return 1
    except ValueError, TypeError:
        return 2
"""


@pytest.mark.integration
def test_ruff_targeting_py314_passes_runtime(tmp_path: Path) -> None:
    ruff = ("ruff", "check", "--no-cache", "--target-version")
    result = _tool(*ruff, "py314", str(PACKAGE_DIR))
    assert result.returncode == 0, result.stdout + result.stderr
    probe = tmp_path / "pep758.py"
    probe.write_text(PEP_758)
    assert _tool(*ruff, "py314", "--select", "E,F", str(probe)).returncode == 0
    assert _tool(*ruff, "py311", "--select", "E,F", str(probe)).returncode != 0


@pytest.mark.integration
def test_mypy_targeting_3_14_passes_runtime_and_fails_a_bad_probe(tmp_path: Path) -> None:
    mypy = ("mypy", "--python-version", "3.14", "--no-incremental")
    result = _tool(*mypy, str(PACKAGE_DIR))
    assert result.returncode == 0, result.stdout + result.stderr
    bad = _tool(*mypy, str(_probe(tmp_path)))
    assert bad.returncode != 0
    for needle in ('"asyncore"', 'has no attribute "Num"', '"find_loader"'):
        assert needle in bad.stdout, bad.stdout
