"""``python -m tests.chaos.workflows [--quick] [--postgresql] [--json PATH]``: the workflow chaos
run (``make chaos-workflows``); prints its results table, exit status 1 if a counter is wrong."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from ..harness import report_run
from . import __doc__ as about
from .run import FULL, QUICK, WorkflowChaos
from .verdict import problems, table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.chaos.workflows", description=about.split("\n\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="60 rows a mode (the test's size)")
    parser.add_argument("--postgresql", action="store_true", help="a private PostgreSQL cluster, not MariaDB")
    parser.add_argument("--rows", type=int, help="workflow rows per mode (default 2,000)")
    parser.add_argument("--clean-restart", action="store_true", help="a clean shutdown, not a crash")
    parser.add_argument("--workdir", help="a new or empty folder (default: a private temporary one)")
    parser.add_argument("--keep-data", action="store_true", help="keep the server's data and the folder")
    parser.add_argument("--json", help="also write the results here (outside the git tree, or ignored)")
    args = parser.parse_args(argv)
    config = replace(
        QUICK if args.quick else FULL,
        server="postgresql" if args.postgresql else "mariadb",
        crash=not args.clean_restart,
        workdir=args.workdir,
        keep_data=args.keep_data,
    )
    if args.rows:
        config = replace(config, rows=args.rows)
    chaos = WorkflowChaos(config)
    results = chaos.run()
    return report_run(table(results), problems(results), results, args.json, chaos.base, config)


if __name__ == "__main__":
    sys.exit(main())
