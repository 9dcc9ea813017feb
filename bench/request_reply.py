"""Request-reply round trips through the database, measured from the caller's side.

    DATABASE_URL=mysql://root@127.0.0.1:3306/bench_rr python bench/request_reply.py [--calls 1000]
    make bench-request-reply      (MariaDB and PostgreSQL; also run by make bench)

Issue #23: 1,000 request-reply calls from 8 client processes, each call checked to get its
own reply, and the p95 round trip. A ``runqueue`` supervisor (``--workers`` processes) serves
the ``test.quote`` handler of tests/testapp; each client process runs ``--threads`` callers at
once, so ``8 x threads`` requests are in flight. A round trip is ``Message.objects.request()``
from call to return: the request's INSERT, a worker's claim, the handler, the reply, the
caller's wake-up (NOTIFY on PostgreSQL, polling 5-50 ms elsewhere) and its read. Runs in a
throw-away test database (``test_<name>`` of DATABASE_URL).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DATABASE_URL", "mysql://root@127.0.0.1:3306/bench_rr")
os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"

import django  # noqa: E402

django.setup()

from django.db import connection, connections  # noqa: E402

from django_dbqueue.models import Message, Reply  # noqa: E402


def client(index: int, calls: int, threads: int, out: multiprocessing.Queue) -> None:
    """``calls`` requests from ``threads`` callers; puts (round trips, wrong replies)."""
    times: list[float] = []
    wrong: list[str] = []

    def caller(thread: int) -> None:
        try:
            for i in range(thread, calls, threads):
                n = index * 1_000_000 + i
                started = time.perf_counter()
                reply = Message.objects.request("test.quote", {"n": n}, timeout=60)
                times.append(time.perf_counter() - started)
                if reply.get("n") != n:
                    wrong.append(f"{n} got {reply}")
        except Exception as exc:  # noqa: BLE001 - counted, reported by the parent
            wrong.append(repr(exc))
        finally:
            connections.close_all()

    pool = [threading.Thread(target=caller, args=(t,)) for t in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    out.put((times, wrong))


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1000, help="requests in all (default 1000)")
    parser.add_argument("--clients", type=int, default=8, help="client processes (default 8)")
    parser.add_argument("--threads", type=int, default=4, help="callers per client process (default 4)")
    parser.add_argument("--workers", type=int, default=2, help="runqueue worker processes (default 2)")
    args = parser.parse_args()
    creation = connection.creation
    name = creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    env = {**os.environ, "DBQUEUE_TEST_DB_NAME": name, "DBQUEUE_LOG_LEVEL": "WARNING"}
    connections.close_all()
    command = ["runqueue", "django_dbqueue.Message", "--settings", "tests.settings", "--poll-interval=0.05"]
    worker = subprocess.Popen(
        [sys.executable, "-m", "django", *command, "--concurrency", str(args.workers)],
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )
    try:
        time.sleep(3)  # the supervisor and its workers start
        context = multiprocessing.get_context("fork")
        out = context.Queue()
        per_client = args.calls // args.clients
        started = time.perf_counter()
        work = (per_client, args.threads, out)
        procs = [context.Process(target=client, args=(c, *work)) for c in range(args.clients)]
        for proc in procs:
            proc.start()
        results = [out.get(timeout=600) for _ in procs]
        elapsed = time.perf_counter() - started
        for proc in procs:
            proc.join(timeout=60)
        leftover = Reply.objects.count()
    finally:
        worker.terminate()
        worker.wait(timeout=60)
        connections.close_all()
        creation.destroy_test_db(name, verbosity=0)
    times = [t for got, _ in results for t in got]
    wrong = [w for _, bad in results for w in bad]
    ms = [t * 1000 for t in times]
    print(
        f"\nRequest-reply ({connection.vendor}): {len(times)} calls from {args.clients} processes x "
        f"{args.threads} callers, {args.workers} worker processes\n"
    )
    print("| calls/s | p50 ms | p95 ms | p99 ms | max ms | wrong or failed | reply slots left |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    print(
        f"| {len(times) / elapsed:.0f} | {statistics.median(ms):.1f} | {percentile(ms, 0.95):.1f} | "
        f"{percentile(ms, 0.99):.1f} | {max(ms):.1f} | {len(wrong)} | {leftover} |"
    )
    if wrong:
        print("first problems:", wrong[:5])
        sys.exit(1)


if __name__ == "__main__":
    main()
