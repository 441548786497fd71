"""The ``runtime`` package as ConfigMap data, read from the source tree at synth time.

Shipping the package this way keeps the multi-GB Neuron DLC untouched, and because the
ConfigMap is generated from the same files the tests import, it cannot drift.
"""

from __future__ import annotations

from pathlib import Path

import runtime

PACKAGE_DIR = Path(runtime.__file__).resolve().parent
PACKAGE_NAME = PACKAGE_DIR.name


def package_files() -> dict[str, str]:
    """File name -> source of every module of the runtime package (flat, no subpackages)."""
    files = {path.name: path.read_text() for path in sorted(PACKAGE_DIR.glob("*.py"))}
    if "__init__.py" not in files:
        raise RuntimeError(f"{PACKAGE_DIR} is not a package (no __init__.py)")
    return files
