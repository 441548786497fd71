"""Synthesize the charts to plain YAML for kubectl users.

    python -m charts --out dist/ --bucket my-model-store \
        --loadtest-image 123456789012.dkr.ecr.us-east-2.amazonaws.com/loadtest:tag \
        --prometheus-url https://aps-workspaces.us-east-2.amazonaws.com/workspaces/ws-1234/

Configuration layers and ``-c`` overrides are the same as for ``cdk synth`` (cdk.json,
``--config`` file, ``-c serving.num_speculative_tokens=5``; see experiment/loading.py).
``--prometheus-url`` is the live guardrails' AMP workspace query URL; without one, pass
``-c guardrails.live.enabled=false`` (the analysis then reads the load test's CloudWatch
metrics).

Besides one ``NNNN-<chart>.k8s.yaml`` per chart (apply them in that order), it writes the
canary step ``cdk deploy`` runs after the baseline is stable: ``canary-patch.json``,
``restore-patch.json`` and ``rollout.env`` (the Rollout's name; docs/serving.md).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import cdk8s

from charts.app import ArmsDriftError, build_charts
from charts.inputs import ClusterInputs
from charts.rollout import canary_step_files
from experiment.loading import ConfigError, add_config_arguments, config_from_arguments

EXIT_BAD_INPUT = 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m charts", description=__doc__)
    parser.add_argument("--out", default="dist", help="directory for the *.k8s.yaml files")
    parser.add_argument("--bucket", help="model-store bucket (default: model_store.bucket_name)")
    parser.add_argument("--loadtest-image", help="load-test image URI (ECR)")
    parser.add_argument(
        "--prometheus-url",
        help="the Prometheus workspace's query URL the rollback analysis reads (the stack's "
        "workspace output); required when guardrails.live.enabled",
    )
    add_config_arguments(parser)
    options = parser.parse_args(argv)
    try:
        config = config_from_arguments(options)
        bucket = options.bucket or config.model_store.bucket_name
        if not bucket:
            raise ConfigError(
                "no bucket: pass --bucket <name> (the stack's model-store bucket output) or "
                "set model_store.bucket_name"
            )
        if not options.loadtest_image:
            raise ConfigError(
                "no load-test image: pass --loadtest-image <ECR URI> (the stack's load-test "
                "image output)"
            )
        inputs = ClusterInputs(
            bucket_name=bucket,
            loadtest_image=options.loadtest_image,
            prometheus_url=options.prometheus_url,
        )
        out = Path(options.out)
        app = cdk8s.App(outdir=str(out))
        build_charts(app, config, inputs)
        steps = canary_step_files(config)
        # cdk8s leaves files it did not write: a chart file of an earlier layout (another
        # order, a renamed project) would be applied with the new ones.
        for stale in [*out.glob("*.k8s.yaml"), *(out / name for name in steps)]:
            stale.unlink(missing_ok=True)
        app.synth()
        for name, text in steps.items():
            (out / name).write_text(text)
    except (ConfigError, ArmsDriftError) as err:
        print(f"charts: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for file in [*sorted(out.glob("*.k8s.yaml")), *(out / name for name in steps)]:
        print(file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
