"""The queue's QuerySet: reading, the claim, and the bulk operations operators use.

The claim protocol (DESIGN.md) exists here once:

1. one short transaction: ``SELECT pk … WHERE state='ready' AND run_at <= now ORDER BY
   priority DESC, run_at, … LIMIT n FOR UPDATE SKIP LOCKED``, then one ``UPDATE … WHERE pk
   IN (…)`` that marks the rows RUNNING with a fresh token and a lease; commit. No user code
   runs while these locks are held;
2. the claimed rows are loaded after the commit, so a row whose data cannot become an
   instance fails alone (``Outcome.unloadable``) instead of taking its batch down.

Every outcome after that is a fenced write of :func:`django_dbqueue.queue.record.record`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from django.db import DatabaseError, models, transaction
from django.db.models import Case, F, Q, Value, When
from django.utils import timezone

from ..backends import DbNow, aware, backend_for, db_now_plus, retry_on_lock_conflicts
from ..priorities import check_priority, check_row_priority
from ..states import QueueState
from ..tracebacks import describe_error
from . import extensions, inserts, rescue
from .lease import Claim, as_timedelta, default_worker_id, new_token, run_alone_apart
from .loading import loadable, row_loader
from .outcome import Outcome
from .record import record
from .row import COMPOSITION_FIELDS, QueueRow
from .statements import statements

#: The rows of the QuerySet: a claim hands back instances of its own model (users' code and
#: the worker call ``process()``, ``mark_succeeded()`` on them). Generic in the model, as
#: django-stubs' ``QuerySet[M]``, so the engine names nothing above it, not even for
#: annotations (the mixin of the public face): it knows a row as ``QueueRow`` (issue #32).
_Row = TypeVar("_Row", bound=QueueRow)

if TYPE_CHECKING:
    # For the type checker the mixin is a QuerySet of its rows (its lookups name the model's
    # own fields); at run time it is mixed into one (QueueQuerySet, or the model's), and
    # generic for annotations only.
    _QuerySetBase = models.QuerySet
else:
    _QuerySetBase = Generic

logger = logging.getLogger("django_dbqueue.query")


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


class QueueQuerySetMixin(_QuerySetBase[_Row]):
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
        qs = self._claimable()
        return qs is not None and qs.ready().order_by().values("pk")[:1].exists()

    def _claimable(self) -> Any:
        """These rows less what the claim filters hold back (paused queues: flow control's,
        through :mod:`~django_dbqueue.queue.extensions`); None when nothing may be claimed."""
        qs: Any = self
        for narrow in extensions.claim_filters:
            qs = narrow(qs)
            if qs is None:
                return None
        return qs

    def pause(self, queue: str | None = None) -> bool:
        """Stop claims from the whole model (or its named ``queue``) on every host."""
        return extensions.pause_queue.only()(self.model, queue, using=self.db)

    def resume(self, queue: str | None = None) -> bool:
        return extensions.resume_queue.only()(self.model, queue, using=self.db)

    def cancel_running(self, requested_by: str = "") -> int:
        """Ask the workers of the RUNNING rows to cancel them; return how many were asked
        (see :mod:`django_dbqueue.flow.cancellation`)."""
        return extensions.cancel_running.only()(self, requested_by)

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
    ) -> list[_Row]:
        """Atomically take up to ``limit`` due rows, highest priority first.

        Each returned row is RUNNING, holds a fresh token, has ``queue_attempts``
        incremented and is leased to ``worker_id`` for ``lease`` (seconds or a timedelta;
        the model's ``queue_lease`` by default). Rows locked by another transaction are
        skipped, never waited for.
        """
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"claim(limit=...) must be a positive integer, got {limit!r}")
        lease_delta = as_timedelta(lease, "lease") if lease is not None else self.model.queue_lease_seconds()
        qs = self._claimable()
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
        gate = _gate(self.model, using)  # None: no limits, the plain claim
        # While this transaction is open the selected rows are locked: one SELECT, one
        # UPDATE by primary key, and no user code before the commit.
        with transaction.atomic(using=using):
            # The model's claim order (plain, or fairness's fair share and aging).
            locked = _in_order(self, limit) if gate is None else gate.take(self, limit)
            if not locked:
                return None
            now = aware(locked[0][2])
            ids = run_alone_apart([(pk, token) for pk, token, _ in locked])
            if gate is not None:
                gate.charge(ids)
            claim = Claim(token=token, worker_id=worker_id, lease=lease, using=using, claimed_at=now)
            # No row locks (SQLite): the UPDATE is a compare-and-set, and the rows a
            # concurrent claimer took are not ours (loaded by token below).
            ready_only = not backend_for(using).skip_locked
            if loadable(self.model):
                # Built once per model and database (queue/statements.py): through the ORM
                # each claim compiled it again and passed its hundreds of keys through the
                # ``pk__in`` lookup (issue #33).
                statements(self.model, using).take(ids, claim, ready_only)
            else:  # a parent's table, a base manager's filters: the QuerySet knows them
                rows = self.model._base_manager.using(using).filter(pk__in=ids)
                if ready_only:
                    rows = rows.filter(queue_state=QueueState.READY)
                rows.update(
                    queue_state=QueueState.RUNNING,
                    queue_token=token,
                    queue_locked_by=worker_id,
                    queue_attempts=F("queue_attempts") + 1,
                    **claim.times(),
                )
        return claim, ids

    def _load(self, claim: Claim, ids: list[Any]) -> list[_Row]:
        """The claimed rows as instances, in claim order (``ids``'). Loading runs field converters
        (``from_db_value``: user code, and a payload that may not decode): a row that cannot
        be loaded ends FAILED with the reason, and the rest of the batch goes on."""
        held = self.model._base_manager.using(claim.using).filter(queue_token=claim.token)
        try:
            # One SELECT built once per model (queue/loading.py); a model whose rows a
            # QuerySet reads differently (a parent's table, a base manager) keeps the QuerySet.
            if loadable(self.model):
                loaded = row_loader(self.model, claim.using).load(ids, claim)
            else:
                loaded = _in_claim_order(list(held.filter(pk__in=ids)), ids)
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
                    record(self.model, claim, [Outcome.unloadable(pk, reason)])
        for row in loaded:
            row._queue_claim = claim
        return loaded

    # -- enqueueing --------------------------------------------------------------------------

    def bulk_enqueue(
        self,
        objs: Iterable[Any],
        batch_size: int = 1000,
        on_duplicate: str | None = None,
        build_instances: bool = False,
    ) -> int:
        """Insert rows (instances, or mappings of field names to values) READY, ``batch_size``
        per INSERT (one by one with a unique key: see unique.py); return how many inserted.

        Mappings go as parameter tuples without model instances (queue/inserts.py), unless
        ``build_instances`` asks for one per row (``Model.__init__`` and each field's
        ``pre_save()``, as ``bulk_create``); like ``bulk_create``, no signal is sent."""
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        objs = list(objs)
        if not build_instances and not any(
            keyed(self.model, on_duplicate) for keyed in extensions.keyed_models
        ):
            plan = inserts.plan_for(self.model, self.db)
            if plan is not None and inserts.insertable(plan, objs):
                fixed: dict[str, Any] = {"queue_state": QueueState.READY}
                defaults: dict[str, Any] = {}
                for stamp_values in extensions.value_stamps:
                    every_row, where_none = stamp_values(self.model, len(objs))
                    fixed.update(every_row)
                    defaults.update(where_none)
                return self._notified(inserts.enqueue_mappings(plan, objs, batch_size, fixed, defaults))
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
            try:
                check_row_priority(instance)
            except ValueError as exc:
                raise ValueError(f"bulk_enqueue() row {number}: {exc}") from None
            instance.queue_state = QueueState.READY
            instances.append(instance)
        for stamp in extensions.enqueue_stamps:
            stamp(self.model, rows=instances)
        for insert in extensions.keyed_inserts:  # checks the policy: a bad one writes nothing
            inserted = insert(self, instances, on_duplicate)
            if inserted is not None:
                return self._notified(inserted)
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
            values["queue_priority"] = check_priority(priority, self.model)
        for stamp in extensions.enqueue_stamps:
            stamp(self.model, values)
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
        return self.not_running().update(queue_priority=check_priority(priority, self.model))

    def reschedule(self, run_at: datetime | timedelta) -> int:
        """Move READY rows to ``run_at`` (a datetime, or a delay from the database's now)."""
        if run_at is None:
            raise ValueError("reschedule() needs a datetime or a timedelta")
        return self.reschedulable().update(queue_run_at=run_at_expression(run_at))

    def cancel(self) -> int:
        """Cancel READY (and IDLE) rows; running and finished rows are left as they are."""
        rows = self.cancellable()
        with transaction.atomic(using=rows.db, savepoint=False):
            # The rows an end must be told of (in a batch, or with dependants), locked first.
            told = (
                list(
                    rows.filter(Q(queue_batch__isnull=False) | Q(queue_dependants=True))
                    .select_for_update()
                    .only("pk", *COMPOSITION_FIELDS)
                )
                if extensions.ended
                else []
            )
            count = rows.update(queue_state=QueueState.CANCELLED, queue_finished_at=DbNow())
            extensions.tell_ended(rows.model, rows.db, cancelled=told)
        return count

    # -- recovery ---------------------------------------------------------------------------

    def rescue_expired(self, limit: int | None = None) -> int:
        """Return RUNNING rows whose lease ran out to READY, or FAILED when their attempts
        are used up (see :mod:`django_dbqueue.queue.rescue`)."""
        return rescue.rescue_expired(self.model, self.db, limit)


def _in_order(qs: Any, limit: int) -> list[tuple[Any, Any, Any]]:
    """Up to ``limit`` due rows of ``qs``, locked, in the model's claim order: a registered
    order's (fairness: fair share and aging), else the plain claim's one locking SELECT."""
    for locked_candidates in extensions.claim_orders:
        return locked_candidates(qs, limit)
    return list(qs.claim_candidates(limit))


def _in_claim_order(rows: list[Any], ids: list[Any]) -> list[Any]:
    position = {pk: index for index, pk in enumerate(ids)}
    rows.sort(key=lambda row: position[row.pk])
    return rows


def _gate(model: type[models.Model], using: str) -> extensions.ClaimGate | None:
    """The claim's gate (flow control's per-key limits), or None: the plain claim."""
    for make in extensions.claim_gates:
        gate = make(model, using)
        if gate is not None:
            return gate
    return None


class QueueQuerySet(QueueQuerySetMixin[_Row], models.QuerySet[_Row]):
    pass


_QueueManagerBase = models.Manager.from_queryset(QueueQuerySet)


class QueueManager(_QueueManagerBase):
    pass
