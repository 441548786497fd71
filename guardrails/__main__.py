"""Print the guardrails as rendered for a target:

    python -m guardrails rules [--generation local-cpu] [-c ...]     # the Prometheus rule file
    python -m guardrails dashboard [-c ...]                          # the Grafana dashboard

The generation defaults to the cluster's (``serving.profile``); ``local-cpu`` is what the
local Prometheus evaluates. The same ``-c`` and ``--config`` layers as every command.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

import yaml

from experiment.loading import ConfigError, add_config_arguments, config_from_arguments
from guardrails.dashboard import dashboard
from guardrails.rules import rule_set
from runtime.spec import Generation

EXIT_BAD_INPUT = 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m guardrails",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("what", choices=("rules", "dashboard"))
    parser.add_argument(
        "--generation",
        choices=[g.value for g in Generation],
        help="the vLLM build whose metric names the rules read (default: the cluster's)",
    )
    add_config_arguments(parser)
    options = parser.parse_args(argv)
    try:
        config = config_from_arguments(options)
    except ConfigError as err:
        print(f"guardrails: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    generation = Generation(options.generation or config.serving.generation)
    rules = rule_set(config, generation)
    if options.what == "rules":
        print(yaml.safe_dump(rules.prometheus(), sort_keys=False, width=1000), end="")
    else:
        print(json.dumps(dashboard(rules), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
