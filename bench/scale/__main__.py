"""``python -m bench.scale``: the queue at 10,000,000 rows on one database server (issue #25).

    DATABASE_URL=mysql://root@127.0.0.1:3306/scale_big .venv/bin/python -m bench.scale
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/scale_big .venv/bin/python -m bench.scale

Builds ``scale_big`` and ``scale_empty`` on the server of DATABASE_URL (bench/scale/build.py),
then measures the claim (plain, fair and aging), enqueue, the admin, the rescue and a purge
under 4 workers, and writes this server's block of BENCHMARKS.md's "Scale: 10 million rows".
The databases are dropped at the end unless ``--keep`` (a later run with the same sizes reuses
them). ``--rows 1000000`` for a quicker run while developing; ``--only claims,admin`` picks
steps.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ["DJANGO_SETTINGS_MODULE"] = "bench.scale.settings"
os.environ["SCALE_QUIET"] = "1"

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402

from bench.scale import build, fairness, pages, purge, queue_ops, report  # noqa: E402

UTC = timezone.utc  # datetime.UTC is Python 3.11+

STEPS = ("build", "claims", "fairness", "enqueue", "admin", "rescue", "purge")  # the build always runs


def load() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def server() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT VERSION()")
        version = cursor.fetchone()[0]
    return f"MariaDB {version}" if connection.vendor == "mysql" else version.split(" on ")[0]


def machine() -> str:
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores, {memory:.1f} GiB RAM, {platform.system()} {platform.release()}, shared"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="orders, and attempt-history rows")
    parser.add_argument("--purgeable", type=int, default=1_000_000, help="finished messages to purge")
    parser.add_argument("--backlog", type=int, default=200_000, help="ready messages the workers drain")
    parser.add_argument("--baseline", type=float, default=30.0, help="seconds of claims before the purge")
    parser.add_argument("--repeat", type=int, default=5, help="loads of each admin page after a warm-up")
    parser.add_argument("--claims", type=int, default=30, help="claims per table and size")
    parser.add_argument("--keep", action="store_true", help="keep the databases for the next run")
    parser.add_argument("--only", default=",".join(STEPS), help=f"steps, of {','.join(STEPS)}")
    parser.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    parser.add_argument("--report-from", type=Path, help="rewrite BENCHMARKS.md's block from a results JSON")
    args = parser.parse_args()
    if args.report_from:
        results = json.loads(args.report_from.read_text())
        text = report.block(
            results["meta"], results["ops"], results["pages"], results["actions"], results["purge"]
        )
        report.write(ROOT / "BENCHMARKS.md", results["meta"]["vendor"], text)
        print(text)
        return
    steps = args.only.split(",")
    if unknown := set(steps) - set(STEPS):
        parser.error(f"unknown steps {sorted(unknown)}; choose from {','.join(STEPS)}")
    if connection.vendor not in ("mysql", "postgresql"):
        parser.error("DATABASE_URL must be a MariaDB/MySQL or PostgreSQL server")
    started, load_start = datetime.now(UTC), load()
    print(f"building {args.rows:,} orders (load {load_start})", flush=True)
    built = time.perf_counter()
    build.build(args.rows, args.rows)
    name = server()
    print(f"{name}: built in {time.perf_counter() - built:.0f} s", flush=True)
    build_s = time.perf_counter() - built
    ops: list = []
    admin_pages: list = []
    actions: list = []
    purged = None
    try:
        if "claims" in steps:
            print("claims:", flush=True)
            ops += queue_ops.claims(args.claims)
        if "fairness" in steps:
            print("fair and aging claims:", flush=True)
            ops += fairness.fair_claims(args.claims)
        if "enqueue" in steps:
            print("enqueue:", flush=True)
            ops += queue_ops.enqueue(saves=1000, bulk=20_000)
        if "admin" in steps:
            print("admin:", flush=True)
            admin_pages, actions = pages.admin(args.rows, args.repeat)
        if "rescue" in steps:
            print("rescue:", flush=True)
            ops += queue_ops.rescue()
        if "purge" in steps:
            print("purge under 4 workers:", flush=True)
            purged = purge.run(args.purgeable, args.backlog, args.baseline)
    finally:
        if not args.keep:
            for using in ("default", "empty"):
                build.drop(using)
            print("dropped scale_big and scale_empty", flush=True)
    # SCALE_COMMIT: the commit of a copy of the tree without .git (a run from a snapshot).
    commit = (
        os.environ.get("SCALE_COMMIT")
        or subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
    )
    meta = {
        "server": name,
        "vendor": connection.vendor,
        "started": started.strftime("%Y-%m-%d %H:%M"),
        "ended": datetime.now(UTC).strftime("%H:%M"),
        "commit": commit,
        "machine": machine(),
        "load_start": load_start,
        "load_end": load(),
        "command": "make bench-scale"
        + (f" SCALE_ARGS='--rows {args.rows}'" if args.rows != 10_000_000 else ""),
        "build_s": build_s,
        "repeat": args.repeat,
        "baseline": args.baseline,
    }
    text = report.block(meta, ops, admin_pages, actions, purged)
    out = ROOT / "bench" / "out"
    out.mkdir(exist_ok=True)
    (out / f"scale_{connection.vendor}.json").write_text(
        json.dumps(
            {"meta": meta, "ops": ops, "pages": admin_pages, "actions": actions, "purge": purged},
            indent=1,
            default=str,
        )
    )
    print(text)
    if not args.no_write:
        report.write(ROOT / "BENCHMARKS.md", connection.vendor, text)
        print("wrote BENCHMARKS.md")


if __name__ == "__main__":
    main()
