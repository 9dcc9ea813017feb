"""``python -m tests.chaos.netns [--full] [--json PATH]``: the many-hosts run (root only).

The quick run (one partition per mode, small) is what ``tests/chaos/test_netns_quick.py`` runs;
``--full`` (``make netns``) adds the atomic partition with the idle-transaction guard off (to
show what it is for) and the slow-link scenario, and prints the figures RELIABILITY.md quotes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from dataclasses import asdict, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from django_dbqueue.compat import UTC

from .network import Network, missing
from .run import Config, NetnsRun

QUICK = Config()
FULL = Config(
    rows=120,
    concurrency=2,
    batch_size=4,
    lease=5.0,
    hold_timeout=45.0,
    partitions=(("lease", "default"), ("atomic", "0"), ("atomic", "default")),
    slow_rows=3000,
)

MUST_BE_ZERO = (
    "rows lost or unfinished",
    "rows with more than one recorded success",
    "rows whose handler effect committed more than once",
    "succeeded rows without their effect",
)


def problems(results: dict[str, Any]) -> list[str]:
    found = []
    for part in results.get("partitions", []):
        name = f"partition {part['mode']} (idle timeout {part['atomic idle timeout']})"
        # Lease mode is at-least-once: h1's handler may run again after its lease was lost.
        keys = MUST_BE_ZERO if part["mode"] == "atomic" else MUST_BE_ZERO[:2]
        found += [f"{name}: {key} = {part[key]}" for key in keys if part.get(key)]
        if not part["settled"]:
            found.append(f"{name}: the queue did not settle")
        guarded = part["mode"] == "lease" or part["atomic idle timeout"] != "0"
        if guarded and part["h1 rows stuck RUNNING until heal"]:
            found.append(f"{name}: {part['h1 rows stuck RUNNING until heal']} row(s) of h1 stuck until heal")
        late = part["h1 outcomes written after the cut for rows it held"]
        if guarded and late:
            found.append(f"{name}: h1 wrote {late} late outcome(s)")
    for drain in results.get("slow link", []):
        name = f"slow link {drain['mode']} ({drain['h3 link']})"
        found += [f"{name}: {key} = {drain[key]}" for key in MUST_BE_ZERO if drain.get(key)]
        if not drain["settled"]:
            found.append(f"{name}: the queue did not settle")
    return found


def table(results: dict[str, Any]) -> str:
    lines = ["", "Many hosts over a real network", "=" * 78]
    for key, value in results.items():
        if isinstance(value, list):
            for item in value:
                lines.append(f"-- {key}: " + ", ".join(f"{k}={item[k]}" for k in ("mode", *list(item)[1:2])))
                lines += [f"   {k:<58} {v}" for k, v in list(item.items())[2:]]
        else:
            lines.append(f"{key:<61} {value}")
    found = problems(results)
    lines.append("=" * 78)
    lines.append(
        "PASS: nothing lost, nothing doubled, no row stuck" if not found else "FAIL: " + "; ".join(found)
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.netns", description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true", help="the full run (make netns)")
    parser.add_argument("--rows", type=int, help="rows per partition scenario")
    parser.add_argument("--slow-rows", type=int, help="rows per mode and pass of the slow link (0: none)")
    parser.add_argument("--json", help="also write the results here (outside the git tree, or ignored)")
    parser.add_argument("--keep", action="store_true", help="keep the run's folder (logs, server data)")
    args = parser.parse_args(argv)
    reason = missing()
    if reason:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 2
    config = FULL if args.full else QUICK
    overrides = {k: v for k, v in (("rows", args.rows), ("slow_rows", args.slow_rows)) if v is not None}
    config = replace(config, **overrides)
    base = Path(tempfile.mkdtemp(prefix="dbqueue-netns-"))
    base.chmod(0o711)  # mariadbd runs as 'mysql' and must reach its own subfolder
    started = datetime.now(UTC)
    with Network() as net:
        run = NetnsRun(config, net, base)
        try:
            results = run.run()
        finally:
            from django.db import connections

            connections.close_all()
            run.db.stop()
    results = {
        "date": started.isoformat(timespec="seconds"),
        "load (1, 5, 15 min)": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        **results,
        "config": asdict(config),
    }
    print(table(results), flush=True)
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2, default=str))
        print(f"results: {out}")
    failed = bool(problems(results))
    if failed or args.keep:
        print(f"logs: {base / 'logs'}")
    else:
        shutil.rmtree(base, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
