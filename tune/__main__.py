"""``python -m tune``: choose the draft model and k from a few measured runs (docs/tuning.md).

    python -m tune                         # local sweep on the miniature (plan printed first)
    python -m tune --quick                 # tiny sweep: 2 k, 16 tokens, 1 request per prompt
    python -m tune --plan-only             # print the plan and stop
    python -m tune --target trn2           # the trn2 plan: compiles, node-hours, cost
    python -m tune report runs/tune-...    # re-render tune.md and the plots from tune.json
    python -m tune schema                  # the JSON Schema of tune.json
    python -m tune fit RUN_DIR RUN_DIR... [--draft NAME ...] [--out DIR]
                                           # the same model from load-test run directories
                                           # (trn2: one comparison per deployed candidate;
                                           # the first one's baseline arm is the baseline)

Configuration: the ``tuning`` section, with the same --config / -c KEY=VALUE layers as every
command of the project (e.g. -c tuning.fit_k=[2,8] -c tuning.holdout_k=[5]).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from experiment.config import ExperimentConfig
from experiment.loading import ConfigError, config_from_arguments, config_parser
from tune.render.text import summary_lines
from tune.results import tune_json_schema


def _parser() -> argparse.ArgumentParser:
    parser = config_parser("python -m tune", __doc__)  # --config, -c as everywhere
    parser.add_argument(
        "command", nargs="?", default="run", choices=["run", "report", "schema", "fit"]
    )
    parser.add_argument(
        "run_dirs",
        nargs="*",
        type=Path,
        help="report: the sweep's directory; fit: load-test run directories, one per candidate "
        "(the first one's baseline arm is the baseline)",
    )
    parser.add_argument(
        "--draft",
        action="append",
        default=[],
        help="fit: the draft of each candidate directory, in order (one value: all of them; "
        "default serving.draft_model)",
    )
    parser.add_argument("--target", choices=["local", "trn2"], default="local")
    parser.add_argument("--quick", action="store_true", help="tiny sweep for tests and smoke")
    parser.add_argument("--plan-only", action="store_true", help="print the plan, run nothing")
    parser.add_argument("--out", type=Path, help="output directory (default runs/tune-<time>)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "schema":
        print(json.dumps(tune_json_schema(), indent=1))
        return 0
    if args.command == "report":
        if len(args.run_dirs) != 1:
            print("error: python -m tune report RUN_DIR", file=sys.stderr)
            return 2
        from tune.report import read_result, write_outputs

        print(write_outputs(read_result(args.run_dirs[0]), args.run_dirs[0])["markdown"])
        return 0
    from local_run.servers import exit_code_of, go_offline

    go_offline()
    try:
        config = config_from_arguments(args)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.command == "fit":
        return _fit(args, config)
    if args.target == "trn2":
        from tune.trn2 import trn2_plan, trn2_plan_text

        print(trn2_plan_text(trn2_plan(config), config))
        print(
            "deploy: python -m charts writes one arm per candidate (tuning.drafts x measured k); "
            "run the load test against each at concurrency 1, then: python -m tune fit "
            "RUN_DIR... --draft NAME... (docs/tuning.md)"
        )
        return 0
    from loadtest.step_model import PredictionError
    from local_run.run import runs_root
    from tune.local import candidate_names, local_plan, plan_text, run_local_sweep
    from tune.report import write_outputs

    if args.plan_only:
        from loadtest.prompts import load_prompts
        from local_run.arms import local_experiment

        prompts = len(load_prompts(local_experiment(config).loadtest.prompts.files))
        drafts = candidate_names(config)
        try:
            print(plan_text(local_plan(config, drafts, prompts, args.quick)))
        except PredictionError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        return 0
    out = args.out or runs_root(config) / f"tune-{time.strftime('%Y%m%d-%H%M%S')}"

    def sweep() -> int:
        try:
            result = run_local_sweep(config, out, quick=args.quick)
        except PredictionError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        paths = write_outputs(result, out)
        for line in summary_lines(result):
            print(line)
        print(f"report: {paths['markdown']}")
        return 0 if result.recommendations else 1

    return exit_code_of(sweep)


def _fit(args: argparse.Namespace, config: ExperimentConfig) -> int:
    from loadtest.step_model import PredictionError
    from tune.fit import fit_from_run_dirs
    from tune.report import write_outputs

    if len(args.run_dirs) < 2:
        print(
            "error: python -m tune fit RUN_DIR RUN_DIR...: at least two candidates at "
            "concurrency 1 (two k of one draft fit the step cost)",
            file=sys.stderr,
        )
        return 2
    try:
        result = fit_from_run_dirs(config, args.run_dirs, args.draft)
    except PredictionError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    from local_run.run import runs_root

    out = args.out or runs_root(config) / f"tune-fit-{time.strftime('%Y%m%d-%H%M%S')}"
    paths = write_outputs(result, out)
    for line in summary_lines(result):
        print(line)
    print(f"report: {paths['markdown']}")
    return 0 if result.recommendations else 1


if __name__ == "__main__":
    sys.exit(main())
