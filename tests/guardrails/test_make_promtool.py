"""`make test` installs promtool (Debian's `prometheus` package) when it is missing, and fails
saying what to install where it cannot. Run for real against stand-ins for apt-get, apt-cache,
id and sudo on a PATH holding nothing else, so nothing is installed here."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAKE = shutil.which("make")

pytestmark = pytest.mark.process  # runs make and its recipe's shell


def _stub(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f'#!/bin/sh\necho {name} "$@" >> {bin_dir}/calls\n{body}\n')
    path.chmod(0o755)


def _run(
    tmp_path: Path, *, uid: int = 0, apt: bool = True, known: bool = False
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "calls").touch()
    env_path, chmod = shutil.which("env"), shutil.which("chmod")
    assert env_path and chmod and MAKE, "needs env, chmod and make"
    (bin_dir / "env").symlink_to(env_path)
    _stub(bin_dir, "id", f"echo {uid}")
    _stub(bin_dir, "sudo", '[ "$1" = -n ] && shift; exec "$@"')
    if apt:
        _stub(bin_dir, "apt-cache", "exit 0" if known else "exit 100")
        # The install puts a promtool on PATH, as Debian's package does (/usr/bin/promtool).
        _stub(
            bin_dir,
            "apt-get",
            f'case "$*" in *" prometheus") printf "#!/bin/sh\\n" > {bin_dir}/promtool; '
            f"{chmod} +x {bin_dir}/promtool;; esac",
        )
    result = subprocess.run(
        [MAKE, "--no-print-directory", "promtool", f"VENV={tmp_path}/no-venv"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={"PATH": str(bin_dir), "HOME": str(tmp_path)},
    )  # fmt: skip
    calls = (bin_dir / "calls").read_text().splitlines()
    return result, [call for call in calls if not call.startswith("id ")]


INSTALL = "apt-get install -y -qq --no-install-recommends prometheus"


def test_root_installs_debians_prometheus_updating_the_lists_first(tmp_path: Path) -> None:
    result, calls = _run(tmp_path)
    assert result.returncode == 0, result.stderr
    assert calls == ["apt-cache show prometheus", "apt-get update -qq", INSTALL]


def test_a_known_package_installs_without_an_update(tmp_path: Path) -> None:
    result, calls = _run(tmp_path, known=True)
    assert result.returncode == 0, result.stderr
    assert calls == ["apt-cache show prometheus", INSTALL]


def test_a_user_installs_through_sudo_without_a_prompt(tmp_path: Path) -> None:
    result, calls = _run(tmp_path, uid=1000, known=True)
    assert result.returncode == 0, result.stderr
    assert calls == [
        "apt-cache show prometheus",
        f"sudo -n env DEBIAN_FRONTEND=noninteractive {INSTALL}",
        INSTALL,
    ]


def test_without_apt_it_fails_saying_what_to_install(tmp_path: Path) -> None:
    result, calls = _run(tmp_path, apt=False)
    assert result.returncode != 0
    assert "promtool is missing" in result.stderr
    assert "apt-get install prometheus" in result.stderr and "release tarball" in result.stderr
    assert calls == []


def test_make_test_needs_it() -> None:
    makefile = (ROOT / "Makefile").read_text()
    test = re.search(r"^test:(.*)$", makefile, re.MULTILINE)
    assert test and "promtool" in test.group(1).split()
