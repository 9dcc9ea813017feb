"""The soak's publisher, a process of its own: ``python -m tests.soak.publisher --seed S
--start N --count C [--rate R]``. Items ``N .. N+C-1`` (tests/soak/work.py) go in as
messages and tasks, in batches; each batch commits with a ``ChaosBatch`` marker, the ledger
the final accounting counts against. Without ``--rate`` it publishes as fast as it can (the
capacity phase's backlog). Its last line on stdout is a JSON summary."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter

LEDGER_MODEL = "soak"
#: Items per batch at most (a publisher that fell behind catches up in batches this big).
MAX_BATCH = 500
TICK = 0.1  # seconds between two batches at a steady rate


def publish_batch(items: list, errors: Counter) -> None:
    """One transaction: the marker, the messages, the tasks. After a database error, look
    whether it committed before trying again (never twice, never lost)."""
    from django.db import connection, transaction

    from django_dbqueue.models import Message
    from tests.soak.work import MESSAGE_KIND
    from tests.testapp.models import ChaosBatch
    from tests.testapp.tasks import soak_task

    number = items[0].n
    while True:
        try:
            with transaction.atomic():
                ChaosBatch.objects.create(model=LEDGER_MODEL, number=number, size=len(items))
                Message.objects.publish_many(
                    {
                        "kind": MESSAGE_KIND,
                        "key": f"soak:{i.n}",
                        "payload": {"n": i.n, "ms": i.ms, "fail": i.fail},
                    }
                    for i in items
                    if i.is_message
                )
                for i in items:
                    if not i.is_message:
                        soak_task.enqueue(i.n, i.ms, i.fail)
            return
        except Exception as exc:  # noqa: BLE001 - counted, then checked and retried
            errors[type(exc).__name__] += 1
            connection.close()
            time.sleep(0.2)
        while True:
            try:
                if ChaosBatch.objects.filter(model=LEDGER_MODEL, number=number).exists():
                    return
                break
            except Exception as exc:  # noqa: BLE001
                errors[type(exc).__name__] += 1
                connection.close()
                time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.soak.publisher", description=__doc__)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--start", type=int, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--rate", type=float, help="items per second (default: as fast as it can)")
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.soak.settings")
    import django

    django.setup()
    from tests.soak.work import plan

    errors: Counter = Counter()
    published = batches = 0
    behind = 0.0  # the most seconds of items the publisher was ever behind its schedule
    started = time.monotonic()
    while published < args.count:
        if args.rate:
            elapsed = time.monotonic() - started
            due = min(int(args.rate * elapsed), args.count) - published
            if due <= 0:
                time.sleep(TICK)
                continue
            behind = max(behind, due / args.rate - TICK)
        else:
            due = args.count - published
        size = min(due, MAX_BATCH)
        first = args.start + published
        publish_batch([plan(n, args.seed) for n in range(first, first + size)], errors)
        published += size
        batches += 1
    summary = {
        "published": published,
        "batches": batches,
        "seconds": round(time.monotonic() - started, 2),
        "errors": dict(errors),
        "most_behind_s": round(max(behind, 0.0), 2),
    }
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
