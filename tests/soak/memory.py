"""Where a worker's memory goes: ``python -m tests.soak.memory --rounds 8 --items 3000``.

One ``Worker`` (the same class ``runqueue`` forks) runs in a thread of this process, on a fresh
``soak_mem_<pid>`` database of the shared MariaDB, while the main thread publishes the soak's
items round after round. After each round has drained, a ``gc.collect()`` and a tracemalloc
snapshot: the RSS and the traced Python heap per round, and the code lines whose allocations grew
between the second round (after warm-up) and the last. A leak in Python objects shows there; RSS
that grows while the traced heap does not is the allocator's (or tracemalloc's own bookkeeping,
printed too), not ours.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import threading
import time
import tracemalloc
from collections import Counter
from typing import Any

from tests.chaos.faults import servers

from .harness import rss_kb


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.soak.memory", description=__doc__)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--items", type=int, default=3000, help="items published per round")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--no-trace", action="store_true", help="RSS only, without tracemalloc's overhead")
    args = parser.parse_args(argv)
    with servers.fresh_database("mariadb", f"soak_mem_{os.getpid()}") as url:
        os.environ["CHAOS_DATABASE_URL"] = url
        os.environ["DJANGO_SETTINGS_MODULE"] = "tests.soak.settings"
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        rows = probe(args.rounds, args.items, args.top, trace=not args.no_trace)
        from django.db import connections

        connections.close_all()
    print(f"{'round':>5} {'items':>8} {'rss KB':>8} {'traced KB':>10} {'tracemalloc KB':>15}")
    for r in rows:
        print(
            f"{r['round']:>5} {r['items']:>8} {r['rss_kb']:>8} {r['traced_kb']:>10} {r['tracemalloc_kb']:>15}"
        )
    return 0


def probe(rounds: int, items: int, top: int, trace: bool = True) -> list[dict[str, Any]]:
    from django.db import connection

    from django_dbqueue.models import Message, TaskRecord
    from django_dbqueue.worker import Worker

    from .collect import Collector
    from .publisher import MAX_BATCH, publish_batch
    from .work import plan

    worker = Worker(
        models=[Message, TaskRecord], batch_size=20, lease=5, worker_id="memory-probe", handle_signals=False
    )
    thread = threading.Thread(target=worker.run, name="worker")
    collector, errors, rows, snapshots = Collector(0), Counter(), [], []
    if trace:
        tracemalloc.start(12)
    thread.start()
    published = 0
    try:
        for index in range(rounds):
            for first in range(published, published + items, MAX_BATCH):
                publish_batch(
                    [plan(n, 0) for n in range(first, min(first + MAX_BATCH, published + items))], errors
                )
            published += items
            while collector.counts()["unfinished"]:
                time.sleep(0.5)
            gc.collect()
            row = {"round": index, "items": published, "rss_kb": rss_kb(os.getpid())}
            if trace:
                # Only the warm-up's snapshot and the newest are kept: snapshots are big and
                # would themselves grow this process's RSS.
                snapshot = tracemalloc.take_snapshot()
                snapshots = [*snapshots[:2], snapshot] if len(snapshots) >= 2 else [*snapshots, snapshot]
            row["traced_kb"] = tracemalloc.get_traced_memory()[0] // 1024
            row["tracemalloc_kb"] = tracemalloc.get_tracemalloc_memory() // 1024
            rows.append(row)
            print(row, flush=True)
    finally:
        worker.stop()
        thread.join()
        connection.close()
    if len(snapshots) >= 3:
        keep = [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen *>")]
        diff = snapshots[-1].filter_traces(keep).compare_to(snapshots[1].filter_traces(keep), "lineno")
        print(f"Allocations that grew from round 1 to round {rows[-1]['round']} (top {top}):")
        for stat in diff[:top]:
            print(f"  {stat}")
    return rows


if __name__ == "__main__":
    sys.exit(main())
