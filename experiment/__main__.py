"""``python -m experiment <command>``: commands about the configuration itself.

- ``upstreams``: the support calendar (every pinned upstream, its source, its end of support)
  with days left; the rows that apply to the configuration given with ``-c``/``--config`` are
  marked, and its warnings and refusals printed as ``cdk synth`` would. ``--markdown`` prints
  docs/upstreams.md instead.

The configuration reference has its own entry point, ``python -m experiment.reference``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from experiment import calendar
from experiment.config import upstreams
from experiment.loading import ConfigError, add_config_arguments, config_from_arguments


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m experiment",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    command = commands.add_parser(
        "upstreams", help="the support calendar of pinned upstreams, with days left"
    )
    add_config_arguments(command)
    command.add_argument(
        "--markdown", action="store_true", help="print docs/upstreams.md (generated) instead"
    )
    args = parser.parse_args(argv)
    if args.markdown:
        print(calendar.markdown(), end="")
        return 0
    try:
        config = config_from_arguments(args)
    except ConfigError as err:
        print(err, file=sys.stderr)
        return 2
    print(calendar.table(upstreams.today(), config))
    findings = config.calendar()
    for warning in findings.warnings:
        print(f"warning: {warning}")
    for refusal in findings.refusals:
        print(f"cdk synth would stop: {refusal}")
    return 1 if findings.refusals else 0


if __name__ == "__main__":
    sys.exit(main())
