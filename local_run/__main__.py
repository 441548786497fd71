"""``python -m local_run`` (what ``make local`` runs): the whole comparison on this machine.

    python -m local_run                       # models, both servers, comparison, report
    python -m local_run --smoke               # one greedy request per arm, no Locust
    python -m local_run --models-only         # generate (or find) the model pair and exit
    python -m local_run -c experiment.local.max_tokens=32 --config my.yaml

Overrides use the same layers and syntax as ``cdk synth`` (see experiment/loading.py).
"""

from __future__ import annotations

import sys

from experiment.loading import ConfigError, config_from_arguments, config_parser
from local_run.arms import local_experiment
from local_run.models import ensure_models
from local_run.servers import exit_code_of, go_offline


def main(argv: list[str] | None = None) -> int:
    parser = config_parser("python -m local_run", __doc__)  # --config, -c as everywhere
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--smoke",
        action="store_true",
        help="start both servers, send one greedy request each, check, stop",
    )
    mode.add_argument(
        "--models-only", action="store_true", help="generate or reuse the model pair, then exit"
    )
    args = parser.parse_args(argv)
    go_offline()  # hubs are unreachable: every library fails fast instead of retrying
    try:
        config = local_experiment(config_from_arguments(args))
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2

    def run() -> int:
        if args.models_only:
            print(ensure_models(config.local).root)
            return 0
        # Imported here: generating models needs neither the load test nor its imports.
        from local_run.run import run_local

        return 0 if run_local(config, smoke_only=args.smoke).ok else 1

    return exit_code_of(run)


if __name__ == "__main__":
    sys.exit(main())
