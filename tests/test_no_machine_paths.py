"""No file of the repository carries an absolute path of the machine it was written on: the
checkout's own top-level directory or its parent (a clone elsewhere must read the same)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    ).stdout


def _repository_files() -> list[Path]:
    # Tracked files and new files not ignored: what a commit would publish.
    listed = _git("ls-files", "--cached", "--others", "--exclude-standard", "-z").split("\0")
    return [ROOT / name for name in listed if name and (ROOT / name).is_file()]


# System directories every machine and container has: a clone directly under one of them
# (e.g. /tmp/checkout) must not flag the container paths the product legitimately names
# (an emptyDir at /tmp, MPLCONFIGDIR=/tmp/matplotlib); the checkout itself is still checked.
SHARED_DIRECTORIES = {"/", "/tmp", "/var/tmp", "/home", "/root", "/opt", "/srv", "/mnt", "/var"}


def _machine_path_pattern(top_level: Path) -> re.Pattern[str]:
    # The path as a path, not as part of a longer name or a URL: with the checkout at
    # /data/checkout, `/data/checkout/x`, `"/data"` and `/data/other` match (anything under
    # the parent is this machine's), `/datax`, `data/checkout` and `https://h/data/...` do not.
    paths = [top_level]
    if str(top_level.parent) not in SHARED_DIRECTORIES:
        paths.append(top_level.parent)
    alternatives = "|".join(re.escape(str(path)) for path in paths)
    return re.compile(rf"(?<![\w.\-/:])(?:{alternatives})(?![\w.\-])")


def test_the_pattern_finds_the_paths_and_nothing_else() -> None:
    pattern = _machine_path_pattern(Path("/data/checkout"))
    assert pattern.search("see /data/checkout/docs")
    assert pattern.search('cwd="/data"')
    assert pattern.search("the notes in /data/shared/reference.md")
    assert not pattern.search("/datax and data/checkout and /data.d")
    assert not pattern.search("https://example.com/data/checkout")


def test_a_clone_under_a_system_directory_still_checks_the_checkout_itself() -> None:
    pattern = _machine_path_pattern(Path("/tmp/checkout"))
    assert pattern.search("see /tmp/checkout/docs")
    assert not pattern.search("MPLCONFIGDIR=/tmp/matplotlib and mountPath /tmp")


@pytest.mark.process
def test_no_repository_file_contains_the_checkout_path_or_its_parent() -> None:
    top_level = Path(_git("rev-parse", "--show-toplevel").strip())
    pattern = _machine_path_pattern(top_level)
    offenders = []
    for file in _repository_files():
        try:
            text = file.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary files (images) hold no paths worth reading
        for number, line in enumerate(text.splitlines(), 1):
            if pattern.search(line):
                offenders.append(f"{file.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    assert not offenders, "absolute machine paths (use paths relative to the checkout):\n" + (
        "\n".join(offenders)
    )
