"""Command line: ``python -m loadtest run|report|publish|schema|probe|traffic`` (see
docs/loadtest.md)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from experiment import ConfigError
from experiment.config import ExperimentConfig
from experiment.loading import PROJECT_ROOT, add_config_arguments, config_from_arguments
from loadtest.plan import API, local_scale

LOG = logging.getLogger("loadtest")
SCHEMA_IN_REPO = "docs/schemas/summary.schema.json"
SUMMARY_SCHEMA = PROJECT_ROOT / SCHEMA_IN_REPO


def _config(args: argparse.Namespace) -> ExperimentConfig:
    config = config_from_arguments(args)
    return local_scale(config) if getattr(args, "local", False) else config


Number = TypeVar("Number", int, float)


def _positive(kind: Callable[[str], Number]) -> Callable[[str], Number]:
    def parse(text: str) -> Number:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text} must be > 0")
        return value

    return parse


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest",
        description="Comparative load test of the baseline and speculative-decoding arms.",
        epilog="The load comes from the configuration: e.g. run -c loadtest.concurrency=8 -c "
        "loadtest.max_tokens=128; run --help-config lists every key with its description.",
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run both arms and write the report")
    run.add_argument(
        "--baseline",
        help="baseline base URL, e.g. http://host:8000 "
        "(with --local: default http://<local.host>:<local.baseline_port>)",
    )
    run.add_argument("--speculative", help="SD arm base URL (with --local: local.speculative_port)")
    run.add_argument(
        "--tiered",
        help="tiered gateway base URL, driven as a third arm after the two (with --local and "
        "local.tiered: local.gateway_port)",
    )
    run.add_argument("--out", type=Path, help="run directory (default runs/loadtest-<time>)")
    add_config_arguments(run)  # --config FILE, -c/--set KEY=VALUE: as every CLI of the project
    run.add_argument(
        "--local",
        action="store_true",
        help="the local run's servers and small scale: local.max_tokens, local.concurrency "
        "and local.requests_per_prompt replace the loadtest.* ones",
    )
    # Only what is not a configuration key has a flag; the load (max_tokens, concurrency,
    # prompts, workers, ...) is set with -c loadtest.<key>=VALUE (--help-config lists them).
    run.add_argument(
        "--max-requests",
        type=_positive(int),
        help="cap on measured requests (a smoke test of a big suite)",
    )
    run.add_argument("--api", choices=list(API), default="chat")
    run.add_argument(
        "--workers-external",
        action="store_true",
        help="do not start loadtest.workers here: each arm's workers connect to its master's "
        "port (loadtest.master_port; + 1 for the speculative arm when the arms run at once; "
        "the cluster's worker pods)",
    )
    run.add_argument(
        "--wait-ready",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="first wait at most this long for both services' /health (default: no wait)",
    )
    run.add_argument(
        "--traffic-bucket",
        metavar="BUCKET",
        help="copy the traffic file from s3://BUCKET/<loadtest.traffic.bucket_key> into the run "
        "directory and replay that copy (the cluster's load-test Job: the model-store bucket)",
    )
    run.add_argument(
        "--no-cloudwatch",
        action="store_true",
        help="do not publish to CloudWatch (default: publish when credentials exist)",
    )
    report = sub.add_parser("report", help="rebuild summary and report from a run directory")
    report.add_argument("run_dir", type=Path)
    # -c loadtest.traffic.length_buckets=[...] rebuckets a replayed trace (no re-import, no
    # rerun); the other keys do not change a finished run.
    add_config_arguments(report)
    publish = sub.add_parser("publish", help="publish a finished run to CloudWatch")
    publish.add_argument("run_dir", type=Path)
    add_config_arguments(publish)
    schema = sub.add_parser("schema", help="write the JSON Schema of summary.json")
    schema.add_argument(
        "--out", type=Path, default=SUMMARY_SCHEMA, help=f"default: {SCHEMA_IN_REPO}"
    )
    probe = sub.add_parser(
        "probe",
        help="the guardrail probe: guardrails.probe's sample through the gateway to both arms, "
        "agreement and per-class acceptance pushed to a Pushgateway",
    )
    probe.add_argument("--gateway", required=True, help="the gateway's base URL")
    probe.add_argument(
        "--pushgateway", required=True, help="the Pushgateway's base URL, e.g. http://host:9091"
    )
    add_config_arguments(probe)
    traffic = sub.add_parser("traffic", help="your own request logs: import and profile them")
    traffic_sub = traffic.add_subparsers(dest="traffic_command", required=True)
    imports = traffic_sub.add_parser(
        "import",
        help="read OpenAI chat-completions request logs (JSONL) into a traffic file that "
        "-c loadtest.traffic.file=FILE replays; prints its profile (no prompt text)",
    )
    imports.add_argument("log", type=Path, help="the request log, one JSON request per line")
    imports.add_argument("--out", type=Path, required=True, help="the traffic file (mode 0600)")
    imports.add_argument(
        "--class-field",
        help="dotted path of each request's class (default: headers.<routing.class_header>)",
    )
    imports.add_argument(
        "--time-field", default="timestamp", help="dotted path of its arrival (default timestamp)"
    )
    imports.add_argument(
        "--redact",
        action="append",
        default=[],
        metavar="REGEX",
        help="replace every match in the messages with [REDACTED] before anything is written "
        "(repeatable)",
    )
    imports.add_argument(
        "--tokenizer",
        help="local directory of the served model's tokenizer, to count input tokens exactly "
        "(default: an approximation, see loadtest/traffic.py)",
    )
    imports.add_argument(
        "--local",
        action="store_true",
        help="check contexts against local.max_model_len and bucket by "
        "local.traffic_length_buckets (the local run's servers)",
    )
    add_config_arguments(imports)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    try:
        if args.command == "run":
            return _run(args)
        if args.command == "report":
            return _report(args)
        if args.command == "schema":
            return _schema(args.out)
        if args.command == "probe":
            return _probe(args)
        if args.command == "traffic":
            return _traffic_import(args)
        return _publish(args)
    except (ConfigError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    from loadtest.render.console import render_summary_table
    from loadtest.runner import NotReady, exit_code, run_comparison

    config = _config(args)
    local = config.local
    if args.local:
        args.baseline = args.baseline or f"http://{local.host}:{local.baseline_port}"
        args.speculative = args.speculative or f"http://{local.host}:{local.speculative_port}"
        if local.tiered:
            args.tiered = args.tiered or f"http://{local.host}:{local.gateway_port}"
    if not args.baseline or not args.speculative:
        raise ConfigError(
            "give both --baseline URL and --speculative URL (or --local for the local run's ports)"
        )
    out = args.out or Path(config.local.runs_dir) / f"loadtest-{time.strftime('%Y%m%d-%H%M%S')}"
    if args.traffic_bucket:
        config = _traffic_from_bucket(config, args.traffic_bucket, out)
    try:
        summary = run_comparison(
            config,
            args.baseline,
            args.speculative,
            out,
            max_requests=args.max_requests,
            api=args.api,
            local=args.local,
            publish_cloudwatch=not args.no_cloudwatch,
            local_workers=not args.workers_external,
            wait_ready_s=args.wait_ready,
            handle_signals=True,
            tiered_url=args.tiered,
        )
    except NotReady as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(render_summary_table(summary))
    print(f"\nreport: {out / 'report.html'} (and report.md, summary.json, summary.csv)")
    code = exit_code(summary, config.loadtest.max_failure_share)
    if code == 1:
        print(
            "exit 1: an arm has no successful measured request or more than "
            f"loadtest.max_failure_share={config.loadtest.max_failure_share:g} failed",
            file=sys.stderr,
        )
    return code


def _traffic_from_bucket(config: ExperimentConfig, bucket: str, out: Path) -> ExperimentConfig:
    """The config replaying the copy of the traffic file that the bucket holds under
    ``loadtest.traffic.bucket_key()``: copied into the run directory, where the prompts stay."""
    from loadtest.traffic import TRAFFIC_COPY, fetch_traffic

    traffic = config.loadtest.traffic
    key = traffic.bucket_key()
    if key is None:
        raise ConfigError(
            "--traffic-bucket needs loadtest.traffic.file (the traffic file's name under "
            "loadtest.traffic.bucket_prefix)"
        )
    copy = fetch_traffic(bucket, key, out / TRAFFIC_COPY, region=config.region)
    replay = traffic.model_copy(update={"file": str(copy.resolve())})
    return config.model_copy(
        update={"loadtest": config.loadtest.model_copy(update={"traffic": replay})}
    )


def _report(args: argparse.Namespace) -> int:
    from loadtest.render.console import render_summary_table
    from loadtest.report import write_report
    from loadtest.summary import previous_cloudwatch, summarize, write_summary

    run_dir: Path = args.run_dir
    traffic = _config(args).loadtest.traffic
    # Only edges the user set (cdk.json, --config or -c) replace the run's own.
    edges = traffic.length_buckets if "length_buckets" in traffic.model_fields_set else None
    # Older run directories (summary.json schema_version 1) are rebuilt from their records.
    cloudwatch = previous_cloudwatch(run_dir)
    summary = summarize(run_dir, length_buckets=edges)
    if cloudwatch is not None:
        summary.cloudwatch = cloudwatch
        write_summary(summary, run_dir)
    paths = write_report(summary, run_dir)
    print(render_summary_table(summary))
    print(f"\nreport: {paths['html']}")
    return 0


def _publish(args: argparse.Namespace) -> int:
    from loadtest.cloudwatch import publish_run
    from loadtest.summary import summarize

    config = _config(args)
    result = publish_run(config, args.run_dir, summarize(args.run_dir))
    print(result.model_dump_json(exclude_none=True))
    return 0 if result.published else 1


def _probe(args: argparse.Namespace) -> int:
    """Exit 0: the run completed and was pushed; 1: a request or the push failed, nothing
    (or not everything) pushed, so the probe-missing alert sees it."""
    from loadtest.guardrail_probe import describe, push, run_probe

    config = _config(args)
    run = run_probe(config, args.gateway)
    print(describe(run))
    if not run.complete:
        print(f"exit 1: {sum(run.failures.values())} failures; nothing pushed", file=sys.stderr)
        return 1
    try:
        push(config, run, args.pushgateway)
    except OSError as err:  # urllib's URLError and HTTPError are OSErrors
        print(f"exit 1: the push to {args.pushgateway} failed: {err}", file=sys.stderr)
        return 1
    print(f"pushed to {args.pushgateway}")
    return 0


def _traffic_import(args: argparse.Namespace) -> int:
    """Exit 0: the traffic file holds every usable request (rejected lines are listed by
    reason); 2: no usable request, nothing written."""
    import re

    from loadtest.traffic import (
        ImportSettings,
        import_log,
        profile,
        tokenizer_counter,
        write_traffic,
    )

    config = _config(args)
    for expression in args.redact:
        try:
            re.compile(expression)
        except re.error as err:
            raise ValueError(
                f"--redact {expression!r} is not a regular expression: {err}"
            ) from None
    settings = ImportSettings(
        allowed_classes=list(config.routing.allowed_classes),
        max_model_len=config.local.max_model_len if args.local else config.serving.max_model_len,
        length_buckets=(
            config.local.traffic_length_buckets
            if args.local
            else config.loadtest.traffic.length_buckets
        ),
        class_field=args.class_field or f"headers.{config.routing.class_header}",
        time_field=args.time_field,
        redact=list(args.redact),
        count_tokens=tokenizer_counter(args.tokenizer) if args.tokenizer else None,
    )
    if not args.log.is_file():
        raise ValueError(f"request log {args.log} does not exist")
    result = import_log(args.log, settings)
    print(
        profile(result, approximate=args.tokenizer is None, length_buckets=settings.length_buckets)
    )
    if not result.requests:
        print("error: no usable request; nothing written", file=sys.stderr)
        return 2
    write_traffic(result.requests, args.out)
    print(f"traffic file: {args.out} (replay: -c loadtest.traffic.file={args.out})")
    return 0


def _schema(out: Path) -> int:
    from loadtest.results import summary_json_schema

    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary_json_schema(), indent=2) + "\n")
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
