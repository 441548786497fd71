#!/usr/bin/env python3
"""CDK entry point: `cdk synth` / `cdk deploy` (see docs/infrastructure.md).

The configuration is validated before any construct is created; a bad value stops synth with
a message that says what to change.
"""

from __future__ import annotations

import sys

import aws_cdk as cdk

from experiment import ConfigError
from stacks import build_app


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
