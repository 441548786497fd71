"""python -m bench.figures render | check | measure NAME [--keep-clone]."""

from __future__ import annotations

import argparse
import sys

from bench.figures import rendered, stale
from bench.figures.measure import (
    HOST_RUN_RECORDS,
    LOCAL_HOSTS,
    MEASUREMENTS,
    MeasureError,
    add_host_run,
    run,
    run_bench,
)
from bench.figures.records import BENCH_RESULT_FILES, ROOT, load_records, write_record
from bench.figures.regions import RegionError


def _render() -> int:
    for path, text in rendered().items():
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
            print(f"rendered {path.relative_to(ROOT)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.figures", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("render", help="rewrite every figures region and docs/records/README.md")
    sub.add_parser("check", help="exit 1 when a document differs from a fresh render")
    measure = sub.add_parser(
        "measure", help="run what a record measures, rewrite docs/records/NAME.json, render"
    )
    measure.add_argument("name", choices=sorted([*MEASUREMENTS, *BENCH_RESULT_FILES]))
    measure.add_argument(
        "--keep-clone", action="store_true", help="keep a fresh clone's directory under runs/"
    )
    args = parser.parse_args(argv)
    try:
        if args.command == "check":
            found = stale()
            for path in found:
                print(f"stale: {path.relative_to(ROOT)} (run python -m bench.figures render)")
            return 1 if found else 0
        if args.command == "measure" and args.name in BENCH_RESULT_FILES:
            run_bench(args.name)
        elif args.command == "measure":
            record = run(MEASUREMENTS[args.name], keep_clone=args.keep_clone)
            print(f"wrote {write_record(record).relative_to(ROOT)}")
            if args.name in HOST_RUN_RECORDS:  # each default run joins the hosts' list
                hosts = add_host_run(record, load_records()[LOCAL_HOSTS])
                print(f"wrote {write_record(hosts).relative_to(ROOT)}")
        return _render()
    except (MeasureError, RegionError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
