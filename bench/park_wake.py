"""What parking and waking a workflow row cost, in statements per row (issue #36: at most two
each), beside a plain atomic job's run: ``benchctl park-wake`` (bench/run.py prints it).

In one process, on the benchmark's MariaDB database, counted at the driver (bench/stmtcount.py:
every statement the server receives, COMMIT and ``SET autocommit`` included), per row:

* ``job``: an atomic job's run (AtomicJob): claim share, the job, its commit;
* ``park_sleep`` / ``park_wait``: the run of a workflow that parks at once, for a sleep or
  until an event (ParkJob), from the claim to its commit;
* ``send``: ``send_event()`` that wakes a waiting row, in a transaction of its own;
* ``after_sleep`` / ``after_wait``: the run after the sleep ended (made due by an UPDATE the
  count leaves out) or after the event came, which replays the park and runs the step.

``park`` and ``wake`` are the figures the issue bounds: a parking run's statements beyond the
job's run, and the send's statements beyond the transaction around it (its BEGIN and COMMIT:
``SET autocommit`` twice and ``COMMIT``, which a view sending in its own transaction pays
anyway). A row asleep is woken by the clock: no statement.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any

from django.apps import apps
from django.db import connection, transaction

from bench import stmtcount
from django_dbqueue.backends import DbNow
from django_dbqueue.worker import Worker
from django_dbqueue.workflows import send_event

#: The statements of the transaction around a send: ``SET autocommit`` off and on, ``COMMIT``.
ENVELOPE = 3


def counted(n: int, action: Callable[[], Any]) -> dict[str, Any]:
    """Statements per row (of ``n``) that ``action`` sent, in all and by kind."""
    before = dict(stmtcount._state["kinds"])
    action()
    after = dict(stmtcount._state["kinds"])
    kinds = {kind: (after[kind] - before.get(kind, 0)) / n for kind in sorted(after)}
    kinds = {kind: per for kind, per in kinds.items() if per}
    return {"per_row": sum(kinds.values()), "kinds": kinds}


def drain(model: Any) -> Callable[[], Any]:
    return lambda: Worker(models=[model], burst=True, handle_signals=False).run()


def park_wake(n: int) -> dict[str, Any]:
    os.environ.setdefault(stmtcount.ENV, tempfile.mkdtemp(prefix="bench-park-"))
    stmtcount.install()
    atomic, park = apps.get_model("dbqapp.AtomicJob"), apps.get_model("dbqapp.ParkJob")
    connection.ensure_connection()
    out: dict[str, Any] = {"n": n}
    atomic.objects.bulk_enqueue([{} for _ in range(n)])
    out["job"] = counted(n, drain(atomic))
    park.objects.bulk_enqueue([{"wait": False} for _ in range(n)])
    out["park_sleep"] = counted(n, drain(park))
    park.objects.filter(wait=False).update(queue_run_at=DbNow())  # the hour passed
    out["after_sleep"] = counted(n, drain(park))
    park.objects.bulk_enqueue([{"wait": True} for _ in range(n)])
    out["park_wait"] = counted(n, drain(park))
    waiting = list(park.objects.filter(wait=True))

    def send_each() -> None:
        for row in waiting:
            with transaction.atomic():
                assert send_event(row, "go"), row.pk

    out["send"] = counted(n, send_each)
    out["after_wait"] = counted(n, drain(park))
    out["park"] = max(out["park_sleep"]["per_row"], out["park_wait"]["per_row"]) - out["job"]["per_row"]
    out["wake"] = out["send"]["per_row"] - ENVELOPE
    return out
