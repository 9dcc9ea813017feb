"""What the soak reads from its database: the backlog and the claim latencies while it runs
(from ``QueueAttempt``, before ``purgequeue`` deletes them), the drain that measures the
capacity, and at the end every published item's fate for :func:`analysis.account`."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django_dbqueue.compat import UTC

from . import analysis
from .publisher import LEDGER_MODEL
from .work import LEDGER_MESSAGE, LEDGER_TASK, MESSAGE_KIND

#: Attempt-history ids read again at each poll: a transaction that took an id commits a
#: little after one with a higher id, and must not be skipped.
OVERLAP = 5_000


def last_json(out: str, err: str) -> dict[str, Any]:
    lines = out.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        return {"error": (err or out)[-3000:]}


def server_now() -> datetime:
    """The database's clock (MariaDB), which stamps claims and due times."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT UTC_TIMESTAMP(6)")
        return cursor.fetchone()[0].replace(tzinfo=UTC)


class Collector:
    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.t0: datetime | None = None  # database time the soak phase began
        self.last_id = 0
        self.seen: set[int] = set()
        self.latencies: list[tuple[float, float]] = []  # (claimed at, s since t0; due -> claimed, s)
        self.outcomes: Counter = Counter()
        self.double_runs = 0  # attempts that failed on the ledger's one-run-per-attempt constraint
        self.backlog: list[dict[str, Any]] = []

    @staticmethod
    def models() -> tuple[Any, Any]:
        from django_dbqueue.models import Message, TaskRecord

        return Message, TaskRecord

    def counts(self) -> dict[str, int]:
        from django.db.models import Q

        from django_dbqueue.states import QueueState

        counts: Counter = Counter()
        for model in self.models():
            counts["ready_due"] += model.objects.ready().count()
            counts["running"] += model.objects.filter(queue_state=QueueState.RUNNING).count()
            counts["unfinished"] += model.objects.filter(
                Q(queue_state=QueueState.READY) | Q(queue_state=QueueState.RUNNING)
            ).count()
            counts["table_rows"] += model.objects.count()
        return dict(counts)

    def start_soak(self) -> None:
        self.t0 = server_now()

    def poll(self, at: float | None) -> None:
        """One sample: the backlog, and the attempts recorded since the last poll."""
        from django_dbqueue.models import QueueAttempt

        try:
            if at is not None:
                load = round(os.getloadavg()[0], 2)  # the machine's: other work slows claims too
                self.backlog.append({"at_s": round(at, 1), **self.counts(), "load1": load})
            rows = QueueAttempt.objects.filter(pk__gt=max(self.last_id - OVERLAP, 0)).values_list(
                "pk", "claimed_at", "due_at", "outcome"
            )
            failed = []
            for pk, claimed, due, outcome in rows:
                if pk in self.seen:
                    continue
                self.seen.add(pk)
                self.last_id = max(self.last_id, pk)
                self.outcomes[outcome] += 1
                if outcome != "succeeded":
                    failed.append(pk)
                if claimed and due and self.t0:
                    self.latencies.append(
                        ((claimed - self.t0).total_seconds(), max((claimed - due).total_seconds(), 0.0))
                    )
            if failed:
                self.double_runs += QueueAttempt.objects.filter(
                    pk__in=failed, error__contains="chaos_ledger_one_run_per_attempt"
                ).count()
        except Exception as exc:  # noqa: BLE001 - a sample lost is reported, the run goes on
            self.outcomes[f"sampler error: {type(exc).__name__}"] += 1
            from django.db import connection

            connection.close()

    def drained(self, timeout: float, tick: Callable[[], None]) -> dict[str, Any]:
        """Wait until nothing is due or running; the capacity from the attempt history."""
        from django.db.models import Min, Sum

        from django_dbqueue.models import QueueAttempt
        from tests.testapp.models import ChaosBatch

        deadline, next_tick = time.monotonic() + timeout, 0.0
        while time.monotonic() < deadline:
            if time.monotonic() >= next_tick:
                tick()
                next_tick = time.monotonic() + 10
            counts = self.counts()
            if counts["ready_due"] == 0 and counts["running"] == 0:
                break
            time.sleep(0.5)
        else:
            raise RuntimeError("the capacity backlog was not drained in time")
        end = server_now()
        first = QueueAttempt.objects.aggregate(first=Min("claimed_at"))["first"]
        attempts = QueueAttempt.objects.filter(finished_at__lte=end).count()
        seconds = (end - first).total_seconds()
        items = ChaosBatch.objects.filter(model=LEDGER_MODEL).aggregate(n=Sum("size"))["n"] or 0
        return {
            "items": items,
            "drain_s": round(seconds, 2),
            "items_per_s": round(items / seconds, 1),
            "attempts_per_s": round(attempts / seconds, 1),
        }

    def settle(self, timeout: float, revive: Callable[[], None]) -> bool:
        """Wait until no item is READY (due or waiting for a retry) or RUNNING."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            revive()
            if self.counts()["unfinished"] == 0:
                return True
            time.sleep(1)
        return False

    # -- the end ---------------------------------------------------------------------------

    def account(self, intended: int, killed: set[int]) -> dict[str, Any]:
        from tests.testapp.models import ChaosBatch, ChaosLedger
        from tests.testapp.tasks import soak_task

        message, task_record = self.models()
        batches = list(ChaosBatch.objects.filter(model=LEDGER_MODEL).values_list("number", "size"))
        expected = {n for number, size in batches for n in range(number, number + size)}
        rows: dict[tuple[bool, int], tuple[str, str]] = {}
        twice = 0
        for key, state, error in message.objects.filter(kind=MESSAGE_KIND).values_list(
            "key", "queue_state", "queue_last_error"
        ):
            twice += (True, int(key.split(":")[1])) in rows
            rows[True, int(key.split(":")[1])] = (state, error)
        for args, state, error in task_record.objects.filter(task_path=soak_task.module_path).values_list(
            "args", "queue_state", "queue_last_error"
        ):
            twice += (False, args[0]) in rows
            rows[False, args[0]] = (state, error)
        runs: dict[tuple[bool, int], list[tuple[int, int]]] = {}
        for kind, n, attempt, pid in ChaosLedger.objects.filter(
            kind__in=(LEDGER_MESSAGE, LEDGER_TASK)
        ).values_list("kind", "job_id", "attempt", "pid"):
            runs.setdefault((kind == LEDGER_MESSAGE, n), []).append((attempt, pid))
        counters = analysis.account(sorted(expected), self.seed, rows, runs, killed)
        counters["items the publisher meant to publish"] = intended
        counters["items in the publisher's ledger (ChaosBatch)"] = sum(size for _, size in batches)
        counters["ledger items missing from the plan (must be 0)"] = len(expected ^ set(range(intended)))
        counters["rows not in the publisher's ledger"] = sum(
            1 for _, n in set(rows) | set(runs) if n not in expected
        )
        counters["items published twice (rows)"] = twice
        # Two live claims of one attempt would make the second run fail on the ledger's
        # constraint: the sampler read every attempt's history before the purge deleted it.
        counters["two runs of one attempt (ledger IntegrityError)"] = self.double_runs
        return {"counters": counters, "outcomes": dict(self.outcomes)}
