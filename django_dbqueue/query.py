"""The queue's QuerySet: reading, the claim, and the bulk operations operators use.

The claim protocol (DESIGN.md) exists here once:

1. one short transaction: ``SELECT pk … WHERE state='ready' AND run_at <= now ORDER BY
   priority DESC, run_at, … LIMIT n FOR UPDATE SKIP LOCKED``, then one ``UPDATE … WHERE pk
   IN (…)`` that marks the rows RUNNING with a fresh token and a lease; commit. No user code
   runs while these locks are held;
2. the claimed rows are loaded after the commit, so a row whose data cannot become an
   instance fails alone (``outcomes.fail_by_key``) instead of taking its batch down.

Every outcome after that is a fenced write of :mod:`django_dbqueue.outcomes`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError, models, transaction
from django.db.models import Case, F, Value, When
from django.utils import timezone

from . import cancellation, composition, limits, outcomes, pauses, rescue, unique
from .backends import DbNow, aware, backend_for, db_now_plus, retry_on_lock_conflicts
from .exceptions import describe_error
from .leases import Claim, as_timedelta, default_worker_id, new_token, run_alone_apart
from .states import QueueState

if TYPE_CHECKING:
    from .models import QueueMixin

    # For the type checker the mixin is a QuerySet (of any QueueMixin model: its lookups name
    # the model's own fields); at run time it is mixed into one (QueueQuerySet, or the model's).
    _QuerySetBase = models.QuerySet[Any]
else:
    _QuerySetBase = object

logger = logging.getLogger("django_dbqueue.query")

#: Priorities are stored in a 32-bit integer column on every database.
PRIORITY_RANGE = (-(2**31), 2**31 - 1)


def check_priority(priority: int) -> int:
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise TypeError(f"priority must be an integer, not {priority!r}")
    low, high = PRIORITY_RANGE
    if not low <= priority <= high:
        raise ValueError(f"priority must be between {low} and {high}, got {priority}")
    return priority


def run_at_expression(run_at: datetime | timedelta | None) -> Any:
    """A due time as SQL: a delay counts from the database's clock."""
    if run_at is None:
        return DbNow()
    if isinstance(run_at, timedelta):
        return db_now_plus(run_at)
    if isinstance(run_at, datetime):
        if timezone.is_naive(run_at):
            raise ValueError("run_at must be timezone-aware (USE_TZ is required)")
        return run_at
    raise TypeError(f"run_at must be a datetime or a timedelta, not {run_at!r}")


class QueueQuerySetMixin(cancellation.CancelRunningMixin, _QuerySetBase):
    """Queue operations for any QuerySet of a QueueMixin model.

    Compose it with your own QuerySet: ``class OrderQuerySet(QueueQuerySetMixin,
    models.QuerySet)``. The bulk operations are one UPDATE each and return a row count;
    none of them touches a RUNNING row (it belongs to its worker until its outcome).
    """

    # -- reading -----------------------------------------------------------------------------

    def ready(self) -> models.QuerySet:
        """Rows that are READY and due now (database clock)."""
        return self.filter(queue_state=QueueState.READY, queue_run_at__lte=DbNow())

    def has_ready(self) -> bool:
        """A cheap, lock-free, index-only probe an idle worker polls with (paused: False)."""
        qs = pauses.unpaused(self)
        return qs is not None and qs.ready().order_by().values("pk")[:1].exists()

    def pause(self, queue: str | None = None) -> bool:
        """Stop claims from the whole model (or its named ``queue``) on every host."""
        return pauses.pause(self.model, queue, using=self.db)

    def resume(self, queue: str | None = None) -> bool:
        return pauses.resume(self.model, queue, using=self.db)

    def in_claim_order(self) -> models.QuerySet:
        """Due rows in the order a claim takes them: priority, due time, then first in
        first out (the enqueue time, and the primary key where it costs no sort)."""
        order = ["-queue_priority", "queue_run_at", "queue_enqueued_at"]
        if backend_for(self.db).order_by_pk:
            order.append("pk")
        return self.ready().order_by(*order)

    # -- the claim ---------------------------------------------------------------------------

    def claim(
        self, limit: int = 1, worker_id: str | None = None, lease: float | timedelta | None = None
    ) -> list[QueueMixin]:
        """Atomically take up to ``limit`` due rows, highest priority first.

        Each returned row is RUNNING, holds a fresh token, has ``queue_attempts``
        incremented and is leased to ``worker_id`` for ``lease`` (seconds or a timedelta;
        the model's ``queue_lease`` by default). Rows locked by another transaction are
        skipped, never waited for.
        """
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"claim(limit=...) must be a positive integer, got {limit!r}")
        lease_delta = as_timedelta(lease, "lease") if lease is not None else self.model.queue_lease_seconds()
        qs = pauses.unpaused(self)
        if qs is None:
            return []
        claim = retry_on_lock_conflicts(
            self.db, lambda: qs._take(limit, worker_id or default_worker_id(), lease_delta), "claim"
        )
        if claim is None:
            return []
        return self._load(*claim)

    def claim_candidates(self, limit: int, *also: str) -> models.QuerySet:
        """The locking SELECT of a claim (public, to EXPLAIN it); ``also``: more columns."""
        locking = self.in_claim_order().select_for_update(skip_locked=True).annotate(dbqueue_now=DbNow())
        return locking.values_list("pk", "queue_token", "dbqueue_now", *also)[:limit]

    def _take(self, limit: int, worker_id: str, lease: timedelta) -> tuple[Claim, list[Any]] | None:
        using = self.db
        token = new_token()
        # While this transaction is open the selected rows are locked: one SELECT, one
        # UPDATE by primary key, and no user code before the commit.
        with transaction.atomic(using=using):
            gate = limits.gate(self.model, using)  # None: no limits, the plain claim
            locked = list(self.claim_candidates(limit)) if gate is None else gate.take(self, limit)
            if not locked:
                return None
            now = aware(locked[0][2])
            ids = run_alone_apart([(pk, token) for pk, token, _ in locked])
            if gate is not None:
                gate.charge(ids)
            rows = self.model._base_manager.using(using).filter(pk__in=ids)
            if not backend_for(using).skip_locked:
                # No row locks (SQLite): the UPDATE is a compare-and-set, and the rows a
                # concurrent claimer took are not ours (loaded by token below).
                rows = rows.filter(queue_state=QueueState.READY)
            rows.update(
                queue_state=QueueState.RUNNING,
                queue_token=token,
                queue_locked_by=worker_id,
                queue_locked_until=now + lease,
                queue_last_attempt_at=now,
                queue_attempts=F("queue_attempts") + 1,
            )
        return Claim(token=token, worker_id=worker_id, lease=lease, using=using, claimed_at=now), ids

    def _load(self, claim: Claim, ids: list[Any]) -> list[QueueMixin]:
        """The claimed rows as instances, in claim order. Loading runs field converters
        (``from_db_value``: user code, and a payload that may not decode): a row that cannot
        be loaded ends FAILED with the reason, and the rest of the batch goes on."""
        held = self.model._base_manager.using(claim.using).filter(queue_token=claim.token)
        try:
            loaded = list(held.filter(pk__in=ids))
        except DatabaseError:
            raise  # the database's trouble, not a row's: the leases bring the rows back
        except Exception:  # noqa: BLE001 - find the row(s) at fault, one by one
            loaded = []
            for pk in ids:
                try:
                    loaded.extend(held.filter(pk=pk))
                except DatabaseError:
                    raise
                except Exception as exc:  # noqa: BLE001 - any error of loading is that row's
                    reason = f"the row could not be loaded: {describe_error(exc)}"
                    logger.error("%s pk=%s %s", self.model._meta.label, pk, reason)
                    outcomes.fail_by_key(self.model, pk, claim, reason)
        position = {pk: index for index, pk in enumerate(ids)}
        loaded.sort(key=lambda row: position[row.pk])
        for row in loaded:
            row._queue_claim = claim
        return loaded

    # -- enqueueing --------------------------------------------------------------------------

    def bulk_enqueue(
        self, objs: Iterable[Any], batch_size: int = 1000, on_duplicate: str | None = None
    ) -> int:
        """Insert rows (instances, or mappings of field names to values) READY, ``batch_size``
        per INSERT (one by one with a unique key: see unique.py); return how many inserted."""
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        instances = []
        for number, row in enumerate(objs):
            if isinstance(row, self.model):
                instance = row
            elif isinstance(row, Mapping):
                try:
                    instance = self.model(**row)
                except TypeError as exc:
                    raise TypeError(f"bulk_enqueue() row {number}: {exc}") from None
            else:
                raise TypeError(
                    f"bulk_enqueue() takes {self.model.__name__} objects or mappings of field "
                    f"names to values, not {type(row).__name__} (row {number})"
                )
            instance.queue_state = QueueState.READY
            instances.append(instance)
        composition.stamp(self.model, rows=instances)
        if unique.keyed(self.model, on_duplicate):  # checks the policy: a bad one writes nothing
            return self._notified(unique.bulk_enqueue_each(self, instances, on_duplicate))
        with transaction.atomic(using=self.db, savepoint=False):
            self.model._base_manager.using(self.db).bulk_create(instances, batch_size=batch_size)
        return self._notified(len(instances))

    def enqueue(self, run_at: datetime | timedelta | None = None, priority: int | None = None) -> int:
        """Queue (or re-queue) the rows: READY, due at ``run_at`` (a datetime, a delay, or
        now), attempts and error cleared. RUNNING rows are left to their worker."""
        values: dict[str, Any] = {
            "queue_state": QueueState.READY,
            "queue_run_at": run_at_expression(run_at),
            "queue_enqueued_at": DbNow(),
            "queue_attempts": 0,
            "queue_last_error": "",
            "queue_finished_at": None,
            "queue_token": None,
            "queue_locked_by": None,
            "queue_locked_until": None,
        }
        if priority is not None:
            values["queue_priority"] = check_priority(priority)
        composition.stamp(self.model, values)
        return self._notified(self.not_running().update(**values))

    def _notified(self, count: int) -> int:
        if count:
            backend_for(self.db).notify([self.model._meta.db_table])
        return count

    # -- what each bulk operation may touch (the admin shows the same sets before it acts) --

    def not_running(self) -> models.QuerySet:
        """Rows a bulk operation may change: a RUNNING row is its worker's until its outcome."""
        return self.exclude(queue_state=QueueState.RUNNING)

    def retryable(self) -> models.QuerySet:
        return self.filter(queue_state__in=(QueueState.READY, QueueState.FAILED))

    def reschedulable(self) -> models.QuerySet:
        return self.filter(queue_state=QueueState.READY)

    def cancellable(self) -> models.QuerySet:
        return self.filter(queue_state__in=(QueueState.READY, QueueState.IDLE))

    # -- bulk operations (one UPDATE each) ---------------------------------------------------

    def retry_now(self) -> int:
        """READY rows (waiting for a retry or a date) and FAILED rows become due now. A FAILED
        row starts over with a fresh attempt budget; a READY row keeps its count."""
        # CASEs first (MySQL evaluates SET left to right); a FAILED row leaves its batch.
        return self._notified(
            self.retryable().update(
                queue_attempts=Case(
                    When(queue_state=QueueState.FAILED, then=Value(0)),
                    default=F("queue_attempts"),
                    output_field=models.PositiveIntegerField(),
                ),
                queue_batch=Case(When(queue_state=QueueState.FAILED, then=None), default=F("queue_batch")),
                queue_state=QueueState.READY,
                queue_run_at=DbNow(),
                queue_finished_at=None,
                queue_token=None,
            )
        )

    def reprioritize(self, priority: int) -> int:
        """Set the priority (higher runs first) of every row that is not RUNNING."""
        return self.not_running().update(queue_priority=check_priority(priority))

    def reschedule(self, run_at: datetime | timedelta) -> int:
        """Move READY rows to ``run_at`` (a datetime, or a delay from the database's now)."""
        if run_at is None:
            raise ValueError("reschedule() needs a datetime or a timedelta")
        return self.reschedulable().update(queue_run_at=run_at_expression(run_at))

    def cancel(self) -> int:
        """Cancel READY (and IDLE) rows; running and finished rows are left as they are."""
        return composition.cancel_rows(self.cancellable())

    # -- recovery ---------------------------------------------------------------------------

    def rescue_expired(self, limit: int | None = None) -> int:
        """Return RUNNING rows whose lease ran out to READY, or FAILED when their attempts
        are used up (see :mod:`django_dbqueue.rescue`)."""
        return rescue.rescue_expired(self.model, self.db, limit)


class QueueQuerySet(QueueQuerySetMixin, models.QuerySet):
    pass


_QueueManagerBase = models.Manager.from_queryset(QueueQuerySet)


class QueueManager(_QueueManagerBase):
    pass
