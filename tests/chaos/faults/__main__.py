"""``python -m tests.chaos.faults`` (``make faults``): the fault table of issue #21.

Options: ``--only a,f-postgresql`` (keys or labels), ``--postgresql-too`` (the row faults on
PostgreSQL as well), ``--rows N`` (good rows per model), ``--json PATH``, ``--keep-logs``.
Exit status 1 if a scenario failed a counter."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from django_dbqueue.compat import UTC

from . import servers
from .child import ROOT
from .report import table
from .scenarios import all_scenarios, pick


def run_scenario(scenario: Any, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    name = f"dbq_faults_{scenario.label}_{os.getpid()}".replace("-", "_")
    spec = {"scenario": scenario.__dict__, "rows": args.rows, "lease": args.lease, "timeout": args.timeout}
    began = time.monotonic()
    with servers.fresh_database(scenario.server, name, own_user=scenario.read_only) as url:
        env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "tests.settings"}
        env.pop("DBQUEUE_TEST_DB_NAME", None)
        proc = subprocess.run(
            [sys.executable, "-m", "tests.chaos.faults.child", json.dumps(spec), str(workdir)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=args.timeout + 240,
        )
    lines = proc.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        result = {"scenario": scenario.__dict__, "error": (proc.stderr or proc.stdout)[-3000:]}
    result["wall"] = round(time.monotonic() - began, 1)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.faults", description=__doc__)
    parser.add_argument("--only", help="comma-separated scenario keys or labels, e.g. a,f-postgresql")
    parser.add_argument("--postgresql-too", action="store_true", help="run the row faults on PostgreSQL too")
    parser.add_argument("--rows", type=int, default=300, help="good rows per model (default 300)")
    parser.add_argument("--lease", type=float, default=2.0, help="runqueue --lease (default 2)")
    parser.add_argument("--timeout", type=float, default=150.0, help="seconds a scenario may take to settle")
    parser.add_argument("--json", type=Path, help="write the results here (outside the git tree, or ignored)")
    parser.add_argument("--keep-logs", action="store_true", help="keep the runqueue logs of passing runs too")
    args = parser.parse_args(argv)
    scenarios = pick(all_scenarios(args.postgresql_too), args.only)
    workdir = Path(tempfile.mkdtemp(prefix="dbq-faults-"))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    header = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit.stdout.strip() or "unknown",
        "load_before": servers.load(),
        "mariadb_max_connections": servers.max_connections("mariadb"),
    }
    print(f"fault table: {len(scenarios)} scenario(s), logs in {workdir}", flush=True)
    results = []
    for scenario in scenarios:
        print(f"-- {scenario.label}: {scenario.title}", flush=True)
        result = run_scenario(scenario, args, workdir)
        results.append(result)
        print(json.dumps({k: v for k, v in result.items() if k != "scenario"}, default=str), flush=True)
    header["load_after"] = servers.load()
    print(table(header, results))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"header": header, "results": results}, indent=2, default=str))
    failed = [r for r in results if not r.get("passed") and not r.get("not_applicable")]
    if failed or args.keep_logs:
        print(f"runqueue logs kept in {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
