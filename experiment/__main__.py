"""``python -m experiment <command>``: commands about the configuration itself.

- ``upstreams``: the support calendar (every pinned upstream, its source, its end of support)
  with days left; the rows that apply to the configuration given with ``-c``/``--config`` are
  marked, and its warnings and refusals printed as ``cdk synth`` would. ``--markdown`` prints
  docs/upstreams.md instead.
- ``pins``: resolves every deploy pin (a hub commit per imported checkpoint, the Gateway API
  plugin's SHA-256, the two EKS add-on versions) and records them in cdk.context.json, where
  ``cdk synth`` and ``python -m charts`` read them; ``--refresh`` resolves them again,
  ``--check`` asks upstream whether the recorded ones still exist (experiment/pins/cli.py).
- ``preflight``: read-only checks, before ``cdk deploy``, of the AWS account (credentials,
  trn2 capacity and quota, EKS and add-on versions, the CDK bootstrap, the bucket name), Docker
  and the model hub; each prints pass, fail with the fix, or skip; exits 1 on a failure
  (experiment/preflight/cli.py).
- ``check``: after ``cdk deploy``, in the manner of ``linkerd check``: the cluster and its
  Neuron devices, the serving pods, the Rollout and its analysis, the gateway's routes, the
  telemetry in Prometheus, the load-test Job; ✓ or ✗ with the fix; ``--local`` checks the
  stack ``python -m local_run`` starts (deploy_check/cli.py, its own package: it reads what
  charts render).

The configuration reference has its own entry point, ``python -m experiment.reference``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from deploy_check import cli as check_cli
from experiment import calendar
from experiment.loading import ConfigError, add_config_arguments, config_from_arguments
from experiment.pins import cli as pins_cli
from experiment.preflight import cli as preflight_cli


def main(argv: Sequence[str] | None = None, *, eks_client: pins_cli.EksClient | None = None) -> int:
    """``eks_client``: region -> EKS client for ``pins`` (tests pass a stubbed one)."""
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
    pins = commands.add_parser(
        "pins",
        help="resolve every deploy pin into cdk.context.json (--refresh, --check)",
        description=pins_cli.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    pins_cli.add_arguments(pins)
    preflight = commands.add_parser(
        "preflight",
        help="read-only checks of the AWS account, Docker and the hub before cdk deploy",
        description=preflight_cli.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    preflight_cli.add_arguments(preflight)
    check = commands.add_parser(
        "check",
        help="after cdk deploy (or beside python -m local_run): is everything up, wired and "
        "watched?",
        description=check_cli.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check_cli.add_arguments(check)
    args = parser.parse_args(argv)
    if args.command == "pins":
        return pins_cli.run(args, eks_client or pins_cli.default_eks_client)
    if args.command == "preflight":
        return preflight_cli.run(args)
    if args.command == "check":
        return check_cli.run(args)
    if args.markdown:
        print(calendar.markdown(), end="")
        return 0
    try:
        config = config_from_arguments(args)
    except ConfigError as err:
        print(err, file=sys.stderr)
        return 2
    print(calendar.table(config.upstreams.on(), config))
    findings = config.calendar()
    for warning in findings.warnings:
        print(f"warning: {warning}")
    for refusal in findings.refusals:
        print(f"cdk synth would stop: {refusal}")
    return 1 if findings.refusals else 0


if __name__ == "__main__":
    sys.exit(main())
