"""``python -m tests.soak --minutes 30`` (``make soak``): see tests/soak/harness.py."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.soak.harness import ROOT, Config, Soak
from tests.soak.report import problems, table


def machine() -> dict[str, str]:
    def run(*cmd: str) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT).stdout.strip()
        except OSError:
            return ""

    meminfo = Path("/proc/meminfo").read_text().split("\n", 1)[0].split()
    return {
        "cores": run("nproc"),
        "memory_gib": f"{int(meminfo[1]) / 2**20:.0f}",
        "mariadb": run("mariadb", "-uroot", "-h127.0.0.1", "-N", "-e", "SELECT VERSION()"),
        "python": sys.version.split()[0],
        "commit": run("git", "rev-parse", "--short", "HEAD"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=30.0, help="length of the soak phase (default 30)")
    parser.add_argument("--load", type=float, help="enqueue rate as a fraction of the capacity (default 0.7)")
    parser.add_argument("--capacity-rows", type=int, help="backlog the capacity is measured on")
    parser.add_argument("--kill-every", type=float, help="seconds between worker SIGKILLs")
    parser.add_argument("--purge-every", type=float, help="seconds between purgequeue runs")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--json", type=Path, help="also write the results here (a git-ignored folder)")
    parser.add_argument("--keep-logs", action="store_true", help="keep the runqueue logs of a passing run")
    args = parser.parse_args(argv)
    if not 0 < args.minutes <= 24 * 60:
        parser.error("--minutes must be more than 0 and at most 1440")
    if args.load is not None and not 0 < args.load <= 1.5:
        parser.error("--load must be more than 0 and at most 1.5")
    overrides = {
        name: value
        for name, value in (
            ("load", args.load),
            ("capacity_rows", args.capacity_rows),
            ("kill_every", args.kill_every),
            ("purge_every", args.purge_every),
            ("seed", args.seed),
        )
        if value is not None
    }
    soak = Soak(Config.for_minutes(args.minutes, **overrides))
    results = soak.run()
    results["machine"] = machine()
    if args.json:  # first: the figures survive a bug in the table below
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2, default=str))
    print(table(results), flush=True)
    if args.json:
        print(f"results: {args.json}")
    failed = bool(problems(results))
    if failed or args.keep_logs:
        print(f"runqueue logs: {soak.logdir}")
    else:
        shutil.rmtree(soak.base, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
