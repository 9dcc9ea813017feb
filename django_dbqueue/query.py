"""QuerySet and manager of queue models: the only module that locks or writes queue rows.

The claim protocol (see DESIGN.md):

1. one short transaction: ``SELECT … WHERE state='ready' AND run_at <= now ORDER BY
   priority DESC, run_at, pk LIMIT n FOR UPDATE SKIP LOCKED``, then one ``UPDATE … WHERE pk
   IN (…)`` that marks the rows RUNNING with a fresh token and a lease; commit; no user code
   runs while these locks are held;
2. every outcome is written with ``WHERE pk … AND queue_token = <token> AND state='running'``
   and its row count is checked, so a worker that lost its claim can never overwrite a row.

Times are always the database's: claims and bulk operations use :class:`DbNow` in SQL, and
a claimed row carries the database time of its claim plus a monotonic offset
(:class:`Claim`), so outcome writes never depend on the worker host's wall clock.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import random
import secrets
import socket
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from django.db import DatabaseError, OperationalError, connections, models, transaction
from django.db.models import Case, F, Value, When
from django.db.models.functions import Cast, Now
from django.db.models.query import ModelIterable
from django.db.models.sql import Query
from django.utils import timezone

from .bulk import insert_rows
from .conf import settings
from .history import (
    AttemptOutcome,
    attempt_for,
    attempt_values_statement,
    can_copy_attempts,
    copy_attempts,
    copy_attempts_statement,
    history_enabled,
    write_attempts,
)
from .insert import NOTHING, datetime_literal, sql_literal
from .loading import RowLayout, convert_rows, convert_value, instances
from .pipeline import CarriedCommit
from .states import QueueState
from .wakeup import notify

if TYPE_CHECKING:
    from .models import QueueMixin

logger = logging.getLogger("django_dbqueue.query")

T = TypeVar("T")

#: The order in which ready rows are claimed; the mixin's composite index serves it.
CLAIM_ORDER = ("-queue_priority", "queue_run_at", "pk")

#: Columns a claim does not read: it overwrites the first four at once, and the last two (a
#: TEXT traceback, a finishing time) are loaded only if a handler reads them.
CLAIM_DEFERRED = (
    "queue_locked_by",
    "queue_locked_until",
    "queue_token",
    "queue_last_attempt_at",
    "queue_last_error",
    "queue_finished_at",
)


class DbNow(Now):
    """The database's current time in UTC, whatever the session's time zone.

    Django's ``Now()`` is ``CURRENT_TIMESTAMP(6)`` on MySQL, which follows the session
    ``time_zone``; Django stores UTC (USE_TZ), so compare with ``UTC_TIMESTAMP(6)``.
    """

    def as_mysql(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        return self.as_sql(compiler, connection, template="UTC_TIMESTAMP(6)", **extra_context)


def db_now_plus(delta: timedelta) -> models.Expression:
    """``DbNow() + delta`` as a datetime expression (an INTERVAL on MySQL)."""
    return models.ExpressionWrapper(
        DbNow() + Value(delta, output_field=models.DurationField()),
        output_field=models.DateTimeField(),
    )


def as_timedelta(value: float | int | timedelta, what: str = "duration") -> timedelta:
    if isinstance(value, timedelta):
        delta = value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        delta = timedelta(seconds=value)
    else:
        raise TypeError(f"{what} must be seconds (int/float) or a timedelta, not {value!r}")
    if delta <= timedelta(0):
        raise ValueError(f"{what} must be positive, got {value!r}")
    return delta


def new_token() -> int:
    """A fresh claim token: random, so a row re-claimed by the same worker gets a new one."""
    return secrets.randbits(62) + 1


@dataclass
class Claim:
    """What a worker holds for a batch of rows it claimed in one statement."""

    token: int
    worker_id: str
    lease: timedelta
    using: str
    #: The database's clock at the claim, and this process's monotonic clock at that moment.
    claimed_at: datetime
    monotonic_at: float = field(default_factory=time.monotonic)
    #: SQL text with this claim's constants written in, by statement (see _success_commit).
    texts: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)

    def now(self) -> datetime:
        """The database's time now, estimated from the claim without a round trip."""
        return self.claimed_at + timedelta(seconds=time.monotonic() - self.monotonic_at)


def is_transient_lock_error(exc: BaseException, using: str) -> bool:
    """A deadlock, a lock-wait timeout or SQLite's busy lock: retrying the statement is safe."""
    vendor = connections[using].vendor
    if vendor == "mysql":
        return bool(exc.args) and exc.args[0] in (1205, 1213)
    if vendor == "postgresql":
        return getattr(exc.__cause__, "sqlstate", None) in ("40P01", "40001", "55P03")
    if vendor == "sqlite":
        return "database is locked" in str(exc) or "database table is locked" in str(exc)
    return False


def retry_on_lock_errors(using: str, operation: Callable[[], T], what: str) -> T:
    """Run ``operation`` (one whole transaction), retrying deadlocks with jittered backoff.

    Inside a caller's transaction a retry is impossible (the transaction is already rolled
    back), so the error goes up unchanged there.
    """
    retries = settings.DEADLOCK_RETRIES
    for attempt in range(retries + 1):
        try:
            return operation()
        except OperationalError as exc:
            if (
                attempt == retries
                or connections[using].in_atomic_block
                or not is_transient_lock_error(exc, using)
            ):
                raise
            pause = random.uniform(0, 0.02 * 2**attempt)
            logger.info("%s hit a lock conflict (%s); retry %d in %.3fs", what, exc, attempt + 1, pause)
            time.sleep(pause)
    raise AssertionError("unreachable")


class QueueQuerySetMixin:
    """Queue operations for any QuerySet of a QueueMixin model.

    Compose it with your own QuerySet: ``class OrderQuerySet(QueueQuerySetMixin,
    models.QuerySet)``. The bulk operations are one UPDATE each and return a row count;
    none of them touches a RUNNING row (it belongs to its worker until the outcome).
    """

    model: type[QueueMixin]

    # -- reading ---------------------------------------------------------------------------

    def ready(self) -> models.QuerySet:
        """Rows that are READY and due now (database clock)."""
        return self.filter(queue_state=QueueState.READY, queue_run_at__lte=DbNow())

    def has_ready(self) -> bool:
        """A cheap, lock-free, index-only probe an idle worker polls with."""
        return self.ready().order_by().values("pk")[:1].exists()

    # -- claiming --------------------------------------------------------------------------

    def claim(
        self,
        limit: int = 1,
        worker_id: str | None = None,
        lease: float | timedelta | None = None,
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
        worker = worker_id or default_worker_id()
        using = self.db
        return retry_on_lock_errors(
            using, lambda: self._claim_once(limit, worker, lease_delta, using), "claim"
        )

    def claim_candidates(self, limit: int) -> models.QuerySet:
        """The locking SELECT of a claim (exposed so that it can be EXPLAINed)."""
        return (
            self._candidates()
            .annotate(_dbq_now=DbNow())
            # Columns the claim overwrites right after are not fetched (nor parsed, for 100
            # rows while their locks are held); the traceback of an earlier attempt, a TEXT
            # column, is loaded only if a handler reads it.
            .defer(*CLAIM_DEFERRED)[:limit]
        )

    def _candidates(self) -> models.QuerySet:
        """The due rows in claim order, locked (skipping locked ones): the WHERE, ORDER BY and
        locking clause of every claim statement."""
        order = CLAIM_ORDER
        if connections[self.db].vendor != "mysql":
            # InnoDB's secondary index ends with the primary key, so the pk tie-breaker is
            # free there; elsewhere it would add a sort over every due row.
            order = CLAIM_ORDER[:2]
        return self.ready().order_by(*order).select_for_update(skip_locked=True)

    def _claim_once(self, limit: int, worker_id: str, lease: timedelta, using: str) -> list[QueueMixin]:
        if self._is_whole_table() and _has_plain_claim(self.model):
            return self._claim_whole_table(limit, worker_id, lease, using)
        token = new_token()
        # During this transaction the selected rows are locked: keep it to one SELECT and
        # one UPDATE by primary key, and run no user code before it commits.
        with transaction.atomic(using=using):
            rows = list(self.claim_candidates(limit))
            if not rows:
                return []
            db_now = _aware(rows[0]._dbq_now)
            locked_until = db_now + lease
            ids = [row.pk for row in rows]
            targets = self.model._base_manager.using(using).filter(pk__in=ids)
            if not connections[using].features.has_select_for_update_skip_locked:
                # No row locks (SQLite): make the UPDATE a compare-and-set; a concurrent
                # claimer may have won some rows, and we keep only ours. Elsewhere the rows
                # are locked already, and by primary key alone the UPDATE locks nothing more.
                targets = targets.filter(queue_state=QueueState.READY)
            updated = targets.update(
                queue_state=QueueState.RUNNING,
                queue_token=token,
                queue_locked_by=worker_id,
                queue_locked_until=locked_until,
                queue_last_attempt_at=db_now,
                queue_attempts=F("queue_attempts") + 1,
            )
        if updated != len(ids):
            won = self._won(ids, token, using)
            rows = [row for row in rows if row.pk in won]
        claim = Claim(token=token, worker_id=worker_id, lease=lease, using=using, claimed_at=db_now)
        for row in rows:
            del row._dbq_now
            row.queue_state = QueueState.RUNNING
            row.queue_token = token
            row.queue_locked_by = worker_id
            row.queue_locked_until = locked_until
            row.queue_last_attempt_at = db_now
            row.queue_attempts += 1
            row._queue_claim = claim
        return rows

    def _is_whole_table(self) -> bool:
        """Whether this QuerySet is the model's whole table, as a manager hands it out (no
        filter, ordering, deferral, annotation, select_related or prefetch): then its
        claim is :meth:`_claim_whole_table`, whose statement is compiled once per model.

        Compared with a new Query's attributes, so anything a QuerySet method changes makes
        it differ (at worst a claim takes the general path, never a wrong statement)."""
        return (
            self._iterable_class is ModelIterable
            and not self._prefetch_related_lookups
            and not self._known_related_objects
            and vars(self.query) == vars(Query(self.model))
        )

    def _claim_whole_table(
        self, limit: int, worker_id: str, lease: timedelta, using: str
    ) -> list[QueueMixin]:
        """The claim of :meth:`_claim_once` with less Python per row (the lease-mode hot path):
        the SELECT is compiled once per model and read as plain tuples, the UPDATE is built by
        hand, and the rows become instances after the commit (see :mod:`.loading`)."""
        token = new_token()
        connection = connections[using]
        with transaction.atomic(using=using):
            statement = _claim_statement(self.model, using, limit)
            with connection.cursor() as cursor:
                cursor.execute(statement.sql, statement.params)
                raw = cursor.fetchall()
                if not raw:
                    return []
                db_now = _aware(convert_value(statement.now, raw[0][-1], connection))
                locked_until = db_now + lease
                ids = [row[statement.pk_index] for row in raw]
                cursor.execute(*_claim_update(self.model, using, ids, token, worker_id, locked_until, db_now))
                updated = cursor.rowcount
        claim = Claim(token=token, worker_id=worker_id, lease=lease, using=using, claimed_at=db_now)
        # Committed: converters (a field's from_db_value) and model construction may be user
        # code, which runs only now.
        try:
            rows = convert_rows(raw, statement.layout, connection)
            attempts = statement.attempts_index
            for row in rows:
                row[attempts] += 1
            if updated != len(ids):
                won = self._won(ids, token, using)
                rows = [row for row in rows if row[statement.pk_index] in won]
            return instances(
                self.model,
                using,
                statement.layout.attnames,
                rows,
                {
                    "queue_state": QueueState.RUNNING,
                    "queue_token": token,
                    "queue_locked_by": worker_id,
                    "queue_locked_until": locked_until,
                    "queue_last_attempt_at": db_now,
                    "_queue_claim": claim,
                },
            )
        except BaseException:
            # Loading failed (e.g. a converter raised): give the rows back unstarted, as the
            # ORM path leaves them when loading fails inside its transaction.
            with contextlib.suppress(DatabaseError):
                self._record_release(ids, claim)
            raise

    def _won(self, ids: Sequence[Any], token: int, using: str) -> set[Any]:
        """Of rows a compare-and-set claim tried to take, those it took (its token)."""
        return set(
            self.model._base_manager.using(using)
            .filter(pk__in=ids, queue_token=token)
            .values_list("pk", flat=True)
        )

    def adopt(self, pk: Any, token: int, worker_id: str = "supervisor") -> QueueMixin | None:
        """Load a RUNNING row by its claim token and hold that claim, to record an outcome
        on behalf of a worker that is gone (None if the claim is over)."""
        row = (
            self.filter(pk=pk, queue_token=token, queue_state=QueueState.RUNNING)
            .annotate(_dbq_now=DbNow())
            .first()
        )
        if row is None:
            return None
        claimed_at = _aware(row._dbq_now)
        del row._dbq_now
        row._queue_claim = Claim(
            token=token,
            worker_id=worker_id,
            lease=self.model.queue_lease_seconds(),
            using=self.db,
            claimed_at=claimed_at,
        )
        return row

    def bulk_enqueue(self, objs: Iterable[QueueMixin | Mapping[str, Any]], batch_size: int = 1000) -> int:
        """Insert new rows as READY queue items, ``batch_size`` rows per INSERT, and return
        how many. Faster than ``bulk_create`` because it asks the database for no ids back
        (the objects keep ``pk=None``): use it to load work, ``bulk_create`` when you need
        the rows afterwards. Runs in the caller's transaction, or in one of its own.

        A row is a model instance or, faster still, a mapping of field names to values
        (``{"customer": 7}``; a missing field takes its default, a callable default is
        called once per call rather than per row, except for unique fields). Every row is
        READY whatever its ``queue_state``. An unknown field or a value its field cannot
        take raises ``ValueError`` before anything is inserted."""
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        rows = list(objs)
        for number, row in enumerate(rows):
            if type(row) is not dict and not isinstance(row, (self.model, Mapping)):
                raise TypeError(
                    f"bulk_enqueue() takes {self.model.__name__} objects or mappings of field "
                    f"names to values, not {type(row).__name__} (row {number})"
                )
        insert_rows(self.model, self.db, rows, batch_size, fixed={"queue_state": QueueState.READY})
        return self._notified(len(rows))

    # -- bulk operations (one UPDATE each) --------------------------------------------------

    def enqueue(
        self,
        run_at: datetime | timedelta | None = None,
        priority: int | None = None,
    ) -> int:
        """Queue (or re-queue) the rows: READY, due at ``run_at`` (a datetime, a delay, or
        now), attempts and error cleared. RUNNING rows are left to their worker."""
        values: dict[str, Any] = {
            "queue_state": QueueState.READY,
            "queue_run_at": _run_at_expression(run_at),
            "queue_enqueued_at": DbNow(),
            "queue_attempts": 0,
            "queue_last_error": "",
            "queue_finished_at": None,
            "queue_token": None,
            "queue_locked_by": None,
            "queue_locked_until": None,
        }
        if priority is not None:
            values["queue_priority"] = _check_priority(priority)
        return self._notified(self.exclude(queue_state=QueueState.RUNNING).update(**values))

    def _notified(self, count: int) -> int:
        if count:
            notify(self.db, [self.model._meta.db_table])
        return count

    def retry_now(self) -> int:
        """READY rows (waiting for a retry or a date) and FAILED rows become due now.

        A FAILED row starts over with a fresh attempt budget; a READY row keeps its count."""
        # queue_attempts comes first: MySQL evaluates SET assignments left to right, so a
        # CASE placed after `queue_state = 'ready'` would see the new state.
        return self._notified(
            self.filter(queue_state__in=(QueueState.READY, QueueState.FAILED)).update(
                queue_attempts=Case(
                    When(queue_state=QueueState.FAILED, then=Value(0)),
                    default=F("queue_attempts"),
                    output_field=models.PositiveIntegerField(),
                ),
                queue_state=QueueState.READY,
                queue_run_at=DbNow(),
                queue_finished_at=None,
            )
        )

    def reprioritize(self, priority: int) -> int:
        """Set the priority (higher runs first) of every row that is not RUNNING."""
        return self.exclude(queue_state=QueueState.RUNNING).update(queue_priority=_check_priority(priority))

    def reschedule(self, run_at: datetime | timedelta) -> int:
        """Move READY rows to ``run_at`` (a datetime, or a delay from the database's now)."""
        if run_at is None:
            raise ValueError("reschedule() needs a datetime or a timedelta")
        return self.filter(queue_state=QueueState.READY).update(queue_run_at=_run_at_expression(run_at))

    def cancel(self) -> int:
        """Cancel READY (and IDLE) rows; running and finished rows are left as they are."""
        return self.filter(queue_state__in=(QueueState.READY, QueueState.IDLE)).update(
            queue_state=QueueState.CANCELLED, queue_finished_at=DbNow()
        )

    # -- recovery --------------------------------------------------------------------------

    def rescue_expired(self, limit: int | None = None) -> int:
        """Return RUNNING rows whose lease ran out to READY, or FAILED when their attempts
        are used up. Bounded (``limit`` rows, SKIP LOCKED): a row whose worker still holds
        its row lock (atomic mode) is skipped, so a live claim is never taken away."""
        limit = limit or settings.RESCUE_LIMIT
        using = self.db
        return retry_on_lock_errors(using, lambda: self._rescue_once(limit, using), "rescue")

    def _rescue_once(self, limit: int, using: str) -> int:
        max_attempts = self.model.queue_retry.max_attempts
        with transaction.atomic(using=using):
            expired = list(
                self.filter(queue_state=QueueState.RUNNING, queue_locked_until__lt=DbNow())
                .order_by()
                .select_for_update(skip_locked=True)
                .annotate(_dbq_now=DbNow())
                .only(
                    "pk",
                    "queue_attempts",
                    "queue_locked_by",
                    "queue_enqueued_at",
                    "queue_run_at",
                    "queue_last_attempt_at",
                )[:limit]
            )
            if not expired:
                return 0
            dead = {row.pk for row in expired if max_attempts and row.queue_attempts >= max_attempts}
            back = [row.pk for row in expired if row.pk not in dead]
            base = self.model._base_manager.using(using)
            cleared = {"queue_token": None, "queue_locked_by": None, "queue_locked_until": None}
            if back:
                base.filter(pk__in=back).update(
                    queue_state=QueueState.READY,
                    queue_run_at=DbNow(),
                    queue_last_error="lease expired: the worker stopped renewing its claim "
                    "(crashed, killed or hung); running it again",
                    **cleared,
                )
            if dead:
                base.filter(pk__in=list(dead)).update(
                    queue_state=QueueState.FAILED,
                    queue_finished_at=DbNow(),
                    queue_last_error=f"lease expired on the last allowed attempt "
                    f"({max_attempts}); the worker stopped renewing its claim",
                    **cleared,
                )
            write_attempts(
                self.model,
                using,
                (
                    attempt_for(
                        row,
                        AttemptOutcome.LOST,
                        _aware(row._dbq_now),
                        "lease expired",
                        worker_id=row.queue_locked_by or "",
                    )
                    for row in expired
                ),
            )
        for row in expired:
            logger.warning(
                "rescued %s pk=%s from worker %s after its lease expired (attempt %s)%s",
                self.model._meta.label,
                row.pk,
                row.queue_locked_by,
                row.queue_attempts,
                " -> FAILED" if row.pk in dead else "",
            )
        return len(expired)

    # -- fenced outcome writes (used by instances and the worker) ----------------------------

    def _fenced(self, ids: Iterable[Any], token: int) -> models.QuerySet:
        """The rows of ``ids`` still held by the claim ``token``.

        Only RUNNING rows carry a positive token (an outcome negates it, a rescue or a
        release clears it), so the token alone fences. It also keeps the statement on the
        primary key: the token is in no index, while a ``queue_state`` condition could lead
        MySQL to scan the state index and lock every RUNNING row's entry (seen on MariaDB
        with small tables), stalling the other workers' outcome writes.
        """
        return self.model._base_manager.using(self.db).filter(pk__in=list(ids), queue_token=token)

    def _record_successes(self, rows: Sequence[QueueMixin], claim: Claim) -> set[Any]:
        """Mark rows SUCCEEDED in one UPDATE (and their attempts in one INSERT, same
        transaction); return the ids actually written (those still ours)."""
        if not rows:
            return set()
        return retry_on_lock_errors(self.db, lambda: self._record_successes_once(rows, claim), "outcome")

    def _update_fenced(self, ids: Sequence[Any], token: int, values: dict[str, Any]) -> int:
        """``UPDATE … SET values WHERE pk IN ids AND queue_token = token``; return the rows
        matched.

        The statement of every outcome, so it is built by hand (quoted names, the fields' own
        value preparation) rather than compiled by the ORM, which costs more than the
        statement's round trip. Values that are expressions take the ORM's path."""
        statement = self._fenced_update_sql(ids, token, values)
        if statement is None:
            return self._fenced(ids, token).update(**values)
        with connections[self.db].cursor() as cursor:
            cursor.execute(*statement)
            return cursor.rowcount

    def _fenced_update_sql(
        self, ids: Sequence[Any], token: int, values: dict[str, Any]
    ) -> tuple[str, list[Any]] | None:
        """The statement of :meth:`_update_fenced` (None if a value is an expression)."""
        if any(hasattr(value, "resolve_expression") for value in values.values()):
            return None
        connection = connections[self.db]
        meta = self.model._meta
        fields = [meta.get_field(name) for name in values]
        prepare_pk = meta.pk.get_db_prep_value
        params = [
            field.get_db_prep_save(value, connection)
            for field, value in zip(fields, values.values(), strict=True)
        ]
        params.extend(prepare_pk(pk, connection) for pk in ids)
        params.append(token)
        return _fenced_sql("UPDATE", self.db, self.model, tuple(f.column for f in fields), len(ids)), params

    def _success_values(self, claim: Claim) -> dict[str, Any]:
        """The columns a success writes (the token negated: the row's claim is over), in the
        order of ``SUCCESS_COLUMNS``."""
        return {
            "queue_state": QueueState.SUCCEEDED,
            "queue_finished_at": claim.now(),
            "queue_locked_until": None,
            "queue_last_error": "",
            "queue_token": -claim.token,
        }

    def _record_successes_once(self, rows: Sequence[QueueMixin], claim: Claim) -> set[Any]:
        ids = [row.pk for row in rows]
        with transaction.atomic(using=self.db, savepoint=False):
            written = self._record_successes_in_one_statement(ids, claim)
            if written is not None:
                return written
            values = self._success_values(claim)
            finished_at = values["queue_finished_at"]
            updated = self._update_fenced(ids, claim.token, values)
            written = set(ids) if updated == len(ids) else self._written(ids, claim, finished_at)
            if can_copy_attempts(self.model):
                copy_attempts(
                    self.model,
                    self.db,
                    ids if len(written) == len(ids) else [pk for pk in ids if pk in written],
                    claim.worker_id,
                    AttemptOutcome.SUCCEEDED,
                )
            else:
                write_attempts(
                    self.model,
                    self.db,
                    (
                        attempt_for(row, AttemptOutcome.SUCCEEDED, finished_at)
                        for row in rows
                        if row.pk in written
                    ),
                )
        return written

    def _success_block(
        self, ids: Sequence[Any], claim: Claim, *, row: QueueMixin | None = None, lock_next: Any = None
    ) -> tuple[str, list[Any], datetime, int] | None:
        """On MariaDB, a success write of ``ids`` as one anonymous ``BEGIN NOT ATOMIC`` block:
        the fenced UPDATE and, with history on, the history's INSERT … SELECT of exactly the
        rows that UPDATE wrote (same token and finishing time, locks held).

        With ``row`` (atomic mode: ``ids`` is that one row's key) the block commits too, its
        attempt row written from the claimed row's values if the UPDATE wrote it (see
        ``_success_block_sql``), and with ``lock_next`` it then takes that row's fenced lock
        (see :mod:`django_dbqueue.pipeline`).

        Returns the SQL, its parameters, the finishing time written and how many rows the
        server counts per row written (the copy counts too); None where no block can do it.
        The SQL is cached: in atomic mode this runs once per job."""
        history = self._block_history()
        if history is None:
            return None
        connection = connections[self.db]
        finished_at = claim.now()
        finished = connection.ops.adapt_datetimefield_value(finished_at)
        # Fixed values are in the SQL text, and so are integer ids (integer_ids()).
        commit = row is not None
        locks = lock_next is not None
        keys: list[Any] = []
        next_key: list[Any] = []
        digits = integer_ids(ids)
        next_digits = integer_ids([lock_next]) if locks else ""
        if digits is not None and next_digits is not None:
            sql = _success_block_sql(self.db, self.model, IDS, history, commit, locks)
            sql = sql.replace(IDS, digits).replace(NEXT_ID, next_digits)
        else:
            prepare_pk = self.model._meta.pk.get_db_prep_value
            keys = [prepare_pk(pk, connection) for pk in ids]
            next_key = [prepare_pk(lock_next, connection)] if locks else []
            sql = _success_block_sql(self.db, self.model, len(ids), history, commit, locks)
        label, worker = self.model._meta.label, claim.worker_id
        if not history:
            written: list[Any] = []
        elif row is None:  # the INSERT … SELECT of copy_attempts_statement(fenced=True)
            written = [label, worker, *keys, -claim.token, finished]
        else:
            adapt = connection.ops.adapt_datetimefield_value
            written = _attempt_values_params(
                label=label,
                object_id=str(row.pk),
                attempt=row.queue_attempts,
                worker=worker,
                enqueued=adapt(row.queue_enqueued_at),
                due=adapt(row.queue_run_at),
                claimed=adapt(claim.claimed_at),
                finished=finished,
            )
        params = _block_params(finished, claim.token, keys, written, next_key, locks=locks)
        return sql, params, finished_at, 2 if history else 1

    def _block_history(self) -> bool | None:
        """Whether a success block of this model copies the history; None where no block can
        write its success (not MariaDB, or a history that cannot be copied by SQL)."""
        connection = connections[self.db]
        if not (connection.vendor == "mysql" and connection.mysql_is_mariadb):
            return None
        history = history_enabled(self.model)
        if history and not can_copy_attempts(self.model):
            return None
        return history

    def _record_successes_in_one_statement(self, ids: Sequence[Any], claim: Claim) -> set[Any] | None:
        """On MariaDB with the history on, the outcome UPDATE and the history's INSERT …
        SELECT in one round trip. None where that does not apply (the caller writes both)."""
        if not history_enabled(self.model):
            return None  # one UPDATE: no block needed
        block = self._success_block(ids, claim)
        if block is None:
            return None
        sql, params, finished_at, per_row = block
        with connections[self.db].cursor() as cursor:
            cursor.execute(sql, params)
            updated = cursor.rowcount // per_row
        return set(ids) if updated == len(ids) else self._written(ids, claim, finished_at)

    def _success_commit(self, row: QueueMixin, claim: Claim, lock_next: Any = None) -> CarriedCommit | None:
        """The success of one atomic-mode job (``row``, as claimed) as a block that also
        commits and, with ``lock_next``, locks the claim's next row for the transaction that
        follows (see :mod:`django_dbqueue.pipeline`). None where no such block is possible.

        This runs once per job, so for integer keys the block is text made once per claim:
        the claim's constants (token, worker, model label, claim time) written in as the
        driver's literals, the job's own values filled in by one ``%`` format."""
        pk = row.pk
        locks = lock_next is not None
        if type(pk) is int and type(row.queue_attempts) is int and (not locks or type(lock_next) is int):
            made = claim.texts.get((self.model, locks), NOTHING)
            if made is NOTHING:
                made = claim.texts[(self.model, locks)] = self._success_commit_text(claim, locks)
            if made is not None:
                template, per_row = made
                connection = connections[self.db]
                finished_at = claim.now()
                values = {
                    "finished": datetime_literal(connection, finished_at),
                    "ids": pk,
                    "next": lock_next,
                    "attempt": row.queue_attempts,
                    "enqueued": datetime_literal(connection, row.queue_enqueued_at),
                    "due": datetime_literal(connection, row.queue_run_at),
                }
                sql = template % values
                decode = _decoder(per_row, locks)
                return CarriedCommit(sql, None, decode, finished_at=finished_at, lock_next=lock_next)
        block = self._success_block([pk], claim, row=row, lock_next=lock_next)
        if block is None:
            return None
        sql, params, finished_at, per_row = block
        decode = _decoder(per_row, locks)
        return CarriedCommit(sql, params, decode, finished_at=finished_at, lock_next=lock_next)

    def _success_commit_text(self, claim: Claim, locks: bool) -> tuple[str, int] | None:
        """The block of ``_success_commit`` for integer keys as a ``%`` format with the
        claim's constants written in, and the rows it counts per row written; None where no
        block is possible."""
        history = self._block_history()
        if history is None:
            return None
        connection = connections[self.db]
        connection.ensure_connection()  # literal() needs the driver's connection
        sql = _success_block_sql(self.db, self.model, IDS, history, True, locks)
        if "%" in sql.replace("%s", ""):
            return None  # a % of its own (in a table name?): the driver's interpolation
        # Two formats: the claim's constants now (positional), the job's values later (by
        # name). The stand-ins become named fields while the text is only our own SQL; the
        # literals go in with their % doubled, so no value can name a field.
        sql = sql.replace(IDS, "%%(ids)d").replace(NEXT_ID, "%%(next)d")

        def constant(value: Any) -> str:
            return value.replace("%", "%%")

        written = (
            _attempt_values_params(
                label=constant(sql_literal(connection, self.model._meta.label)),
                object_id="'%(ids)d'",
                attempt="%(attempt)d",
                worker=constant(sql_literal(connection, claim.worker_id)),
                enqueued="%(enqueued)s",
                due="%(due)s",
                claimed=constant(datetime_literal(connection, claim.claimed_at)),
                finished="%(finished)s",
            )
            if history
            else []
        )
        args = _block_params("%(finished)s", str(claim.token), [], written, [], locks=locks)
        return sql % tuple(args), 2 if history else 1

    def _written(self, ids: Sequence[Any], claim: Claim, finished_at: datetime) -> set[Any]:
        """The rows of ``ids`` that one success write wrote, when it matched fewer than all: a
        finished row keeps its claim's token, negated, and this finishing time (not an earlier
        duplicate's)."""
        return set(
            self.model._base_manager.using(self.db)
            .filter(pk__in=ids, queue_token=-claim.token, queue_finished_at=finished_at)
            .values_list("pk", flat=True)
        )

    def _record_failure(
        self,
        row: QueueMixin,
        claim: Claim,
        error: str,
        retry_at: datetime | None,
        extra: dict[str, Any] | None = None,
    ) -> bool:
        finished_at = claim.now()
        values: dict[str, Any] = {"queue_last_error": error, "queue_locked_until": None, **(extra or {})}
        if retry_at is None:
            values.update(
                queue_state=QueueState.FAILED, queue_finished_at=finished_at, queue_token=-claim.token
            )
        else:
            values.update(
                queue_state=QueueState.READY, queue_run_at=retry_at, queue_token=None, queue_locked_by=None
            )
        outcome = AttemptOutcome.FAILED if retry_at is None else AttemptOutcome.RETRIED

        def write() -> bool:
            with transaction.atomic(using=self.db, savepoint=False):
                if self._update_fenced([row.pk], claim.token, values) != 1:
                    return False
                write_attempts(self.model, self.db, [attempt_for(row, outcome, finished_at, error)])
            return True

        return retry_on_lock_errors(self.db, write, "outcome")

    def _record_release(self, ids: Sequence[Any], claim: Claim) -> int:
        """Give rows back unprocessed: READY again, the claim's attempt not counted."""
        if not ids:
            return 0
        return self._fenced(ids, claim.token).update(
            queue_state=QueueState.READY,
            queue_attempts=F("queue_attempts") - 1,
            queue_token=None,
            queue_locked_by=None,
            queue_locked_until=None,
        )

    def _renew(self, ids: Sequence[Any], claim: Claim) -> set[Any]:
        """Extend the lease of the rows still ours; return those ids.

        Rows locked right now are skipped rather than waited for: in atomic mode the
        worker's own transaction holds them, and that lock already protects them."""
        if not ids:
            return set()
        using = self.db

        def renew() -> set[Any]:
            with transaction.atomic(using=using):
                held = list(
                    self._fenced(ids, claim.token)
                    .order_by()
                    .select_for_update(skip_locked=True)
                    .values_list("pk", "queue_token")
                )
                held = [pk for pk, _ in held]
                if held:
                    self.model._base_manager.using(using).filter(pk__in=held).update(
                        queue_locked_until=claim.now() + claim.lease
                    )
                return set(held)

        return retry_on_lock_errors(using, renew, "lease renewal")

    def _lock_held(self, ids: Sequence[Any], claim: Claim) -> set[Any]:
        """Inside a transaction: lock the rows still ours (waits, never skips)."""
        # By primary key: the fence's token is in no index, so no covering scan of the state
        # index can serve it (that scan would lock, and wait for, other workers' rows).
        # Hand-built like the outcome writes: in atomic mode this runs once per job.
        connection = connections[self.db]
        meta = self.model._meta
        sql = _fenced_sql("SELECT", self.db, self.model, (), len(ids))
        params = [meta.pk.get_db_prep_value(pk, connection) for pk in ids]
        params.append(claim.token)
        with connection.cursor() as cursor:
            if connection.features.has_select_for_update:  # SQLite: its one writer locks all
                sql = f"{sql} {connection.ops.for_update_sql()}"
            cursor.execute(sql, params)
            keys = [pk for (pk,) in cursor.fetchall()]
        to_python = meta.pk.to_python
        return {to_python(pk) for pk in keys}


class QueueQuerySet(QueueQuerySetMixin, models.QuerySet):
    pass


class QueueManager(models.Manager.from_queryset(QueueQuerySet)):  # type: ignore[misc]
    pass


def _block_params(
    finished: Any,
    token: Any,
    keys: Sequence[Any],
    history: Sequence[Any],
    next_key: Sequence[Any],
    *,
    locks: bool,
) -> list[Any]:
    """The values of ``_success_block_sql``'s placeholders, in order: the success UPDATE's,
    the history statement's (``history``, empty with history off), the next lock's. ``keys``
    and ``next_key`` are empty where the ids are in the text."""
    params = [finished, *keys, token, *history]
    if locks:
        params += [*next_key, token]
    return params


def _attempt_values_params(
    *,
    label: Any,
    object_id: Any,
    attempt: Any,
    worker: Any,
    enqueued: Any,
    due: Any,
    claimed: Any,
    finished: Any,
) -> list[Any]:
    """The values of a one-row block's history (``attempt_values_statement``), in the order
    of ``ATTEMPT_COLUMNS``: the one place that order is written, for the parameter and the
    per-claim text versions of the block (hence by keyword only)."""
    return [label, object_id, attempt, worker, enqueued, due, claimed, finished]


@functools.cache
def _decoder(per_row: int, locks: bool) -> Callable[[int], tuple[bool | None, bool]]:
    """What the row count of a carried success block means: (outcome written, or None if it
    cannot tell; next row locked). The count is per_row x written + locked, each 0 or 1."""

    def decode(count: int) -> tuple[bool | None, bool]:
        if not locks:
            return count > 0, False
        if per_row == 2:
            return count >= 2, count % 2 == 1
        if count == 1:
            return None, False  # written or locked, not both: the caller reads which
        return count == 2, count == 2

    return decode


def integer_ids(ids: Sequence[Any]) -> str | None:
    """``ids`` as the inside of ``IN (…)`` when all are integers (digits only: nothing to
    escape), else None and they go as parameters. A claim or a success of a batch names a
    hundred ids, each a Python call for the driver to escape."""
    if all(type(pk) is int for pk in ids):
        return ", ".join(map(str, ids))
    return None


#: Stand-ins for lists of integer ids in cached SQL text, replaced before it is sent.
IDS = "/*dbqueue ids*/"
NEXT_ID = "/*dbqueue next id*/"


def _in_list(id_count: int | str) -> str:
    """The inside of ``IN (…)``: ``id_count`` placeholders, or a stand-in (IDS, NEXT_ID)."""
    return id_count if isinstance(id_count, str) else ", ".join(["%s"] * id_count)


@functools.lru_cache(maxsize=512)
def _fenced_sql(
    verb: str, using: str, model: type[QueueMixin], columns: tuple[str, ...], id_count: int | str
) -> str:
    """``UPDATE t SET columns… WHERE <fence>``, ``SELECT pk FROM t WHERE <fence>``, the no-op
    ``UPDATE`` that locks (verb ``LOCK``) or the success (verb ``SUCCEED``), the fence being
    ``pk IN (id_count placeholders, or a stand-in) AND queue_token = %s``."""
    quote = connections[using].ops.quote_name
    meta = model._meta
    pk = quote(meta.pk.column)
    fence = f"WHERE {pk} IN ({_in_list(id_count)}) AND {quote(meta.get_field('queue_token').column)} = %s"
    if verb == "SELECT":
        return f"SELECT {pk} FROM {quote(meta.db_table)} {fence}"
    token = quote(meta.get_field("queue_token").column)
    if verb == "LOCK":  # an UPDATE that changes nothing: the rows' X locks, and their count
        return f"UPDATE {quote(meta.db_table)} SET {token} = {token} {fence}"
    if verb == "SUCCEED":  # the values of _success_values(), fixed ones as SQL: one parameter
        state, finished, until, error = (quote(meta.get_field(name).column) for name in SUCCESS_COLUMNS[:4])
        return (
            f"UPDATE {quote(meta.db_table)} SET {state} = '{QueueState.SUCCEEDED.value}', "
            f"{finished} = %s, {until} = NULL, {error} = '', {token} = -{token} {fence}"
        )
    assignments = ", ".join(f"{quote(column)} = %s" for column in columns)
    return f"UPDATE {quote(meta.db_table)} SET {assignments} {fence}"


#: The columns a success writes, in the order of ``_success_values`` and ``_success_block``.
SUCCESS_COLUMNS = (
    "queue_state",
    "queue_finished_at",
    "queue_locked_until",
    "queue_last_error",
    "queue_token",
)


@functools.lru_cache(maxsize=512)
def _success_block_sql(
    using: str, model: type[QueueMixin], id_count: int | str, history: bool, commit: bool, lock_next: bool
) -> str:
    """The SQL of ``QueueQuerySetMixin._success_block`` (MariaDB). With ``id_count`` = IDS, the
    ids and the next row's id are the stand-ins IDS and NEXT_ID."""
    statements = [_fenced_sql("SUCCEED", using, model, (), id_count)]
    if history and commit:
        # One row (atomic mode): its attempt from the claimed values, if the fence held.
        values = attempt_values_statement(using, AttemptOutcome.SUCCEEDED)
        statements.append(f"IF ROW_COUNT() > 0 THEN {values}; END IF")
    elif history:
        statements.append(
            copy_attempts_statement(using, model, id_count, fenced=True, outcome=AttemptOutcome.SUCCEEDED)
        )
    if commit:
        statements.append("COMMIT")
    if lock_next:
        # A failed lock (lock-wait timeout, deadlock) must not fail the block: the
        # transaction before it is committed. It counts 0; the next job locks for itself.
        statements.append(
            "BEGIN DECLARE CONTINUE HANDLER FOR SQLEXCEPTION BEGIN END; "
            f"{_fenced_sql('LOCK', using, model, (), NEXT_ID if id_count == IDS else 1)}; END"
        )
    return f"BEGIN NOT ATOMIC {'; '.join(statements)}; END"


@dataclass(frozen=True)
class _ClaimStatement:
    """The SELECT of a whole-table claim: the columns of ``layout``, then the database clock
    (``now`` says how to convert it)."""

    sql: str
    params: tuple[Any, ...]
    layout: RowLayout
    now: RowLayout
    pk_index: int
    attempts_index: int


@functools.lru_cache(maxsize=256)
def _claim_statement(model: type[QueueMixin], using: str, limit: int) -> _ClaimStatement:
    """Compiled by the ORM once per model, database and limit, from the same WHERE, ORDER BY
    and locking clause as :meth:`QueueQuerySetMixin.claim_candidates` (a test compares them).
    Must be called inside a transaction (Django compiles FOR UPDATE only there)."""
    connection = connections[using]
    # MySQL: DATETIME columns come as text, parsed in .loading (faster than mysqlclient).
    as_text = connection.vendor == "mysql"
    fields = [f for f in model._meta.concrete_fields if f.name not in CLAIM_DEFERRED]
    names: list[str] = []
    annotations: dict[str, Any] = {}
    for f in fields:
        if as_text and type(f) is models.DateTimeField:
            names.append(f"_dbq_text_{f.attname}")
            annotations[names[-1]] = Cast(f.attname, models.CharField())
        else:
            names.append(f.attname)
    annotations["_dbq_now"] = Cast(DbNow(), models.CharField()) if as_text else DbNow()
    names.append("_dbq_now")
    queryset = QueueQuerySet(model=model, using=using)._candidates().annotate(**annotations)
    compiler = queryset.values_list(*names)[:limit].query.get_compiler(using)
    sql, params = compiler.as_sql()
    # The columns in the order the compiler selected them, each with the expression whose
    # converters apply to it (a text column converts as the field it was cast from).
    expressions, attnames, text = [], [], set()
    for index, (expression, _, alias) in enumerate(compiler.select):
        if isinstance(expression, Cast):
            text.add(index)
            expression = expression.get_source_expressions()[0]
        expressions.append(expression)
        attnames.append(None if alias == "_dbq_now" else expression.target.attname)
    if attnames[-1] is not None or None in attnames[:-1] or len(attnames) != len(names):
        raise AssertionError(f"unexpected claim columns for {model._meta.label}: {attnames}")
    n = len(fields)

    def layout(start: int, stop: int) -> RowLayout:
        return RowLayout(
            model=model,
            attnames=tuple(attnames[start:stop]),  # type: ignore[arg-type]
            expressions=tuple(expressions[start:stop]),
            text_datetimes=frozenset(i - start for i in text if start <= i < stop),
        )

    return _ClaimStatement(
        sql=sql,
        params=tuple(params),
        layout=layout(0, n),
        now=layout(n, n + 1),
        pk_index=attnames.index(model._meta.pk.attname),
        attempts_index=attnames.index("queue_attempts"),
    )


def _claim_update(
    model: type[QueueMixin],
    using: str,
    ids: Sequence[Any],
    token: int,
    worker_id: str,
    locked_until: datetime,
    db_now: datetime,
) -> tuple[str, list[Any]]:
    """The claim's ``UPDATE … WHERE pk IN (ids)`` (``AND queue_state = 'ready'`` as a
    compare-and-set where rows cannot be locked: SQLite). ``ids`` are the values the SELECT
    read, so they need no preparation."""
    connection = connections[using]
    compare_and_set = not connection.features.has_select_for_update_skip_locked
    head, tail = _claim_update_sql(model, using, compare_and_set)
    meta = model._meta
    values = (
        ("queue_state", QueueState.RUNNING),
        ("queue_token", token),
        ("queue_locked_by", worker_id),
        ("queue_locked_until", locked_until),
        ("queue_last_attempt_at", db_now),
    )
    params = [meta.get_field(name).get_db_prep_save(value, connection) for name, value in values]
    in_list = integer_ids(ids)
    if in_list is None:
        in_list = ", ".join(["%s"] * len(ids))
        params.extend(ids)
    if compare_and_set:
        params.append(QueueState.READY.value)
    return f"{head}{in_list}{tail}", params


@functools.lru_cache(maxsize=256)
def _claim_update_sql(model: type[QueueMixin], using: str, compare_and_set: bool) -> tuple[str, str]:
    quote = connections[using].ops.quote_name
    meta = model._meta

    def column(name: str) -> str:
        return quote(meta.get_field(name).column)

    assignments = ", ".join(
        f"{column(name)} = %s"
        for name in (
            "queue_state",
            "queue_token",
            "queue_locked_by",
            "queue_locked_until",
            "queue_last_attempt_at",
        )
    )
    attempts = column("queue_attempts")
    head = (
        f"UPDATE {quote(meta.db_table)} SET {assignments}, {attempts} = {attempts} + 1 "
        f"WHERE {quote(meta.pk.column)} IN ("
    )
    tail = ")" + (f" AND {column('queue_state')} = %s" if compare_and_set else "")
    return head, tail


@functools.cache
def _has_plain_claim(model: type[QueueMixin]) -> bool:
    """Whether :meth:`QueueQuerySetMixin._claim_whole_table` can claim this model's rows:
    one primary-key column and every queue column in the model's own table (not a
    multi-table parent's), which its hand-built UPDATE assumes."""
    meta = model._meta
    if getattr(meta, "is_composite_pk", False) or meta.pk is None:
        return False
    return all(
        meta.get_field(name).model._meta.db_table == meta.db_table
        for name in ("queue_state", "queue_attempts", *CLAIM_DEFERRED)
    )


def _check_priority(priority: int) -> int:
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise TypeError(f"priority must be an integer, not {priority!r}")
    if not -(2**31) <= priority < 2**31:
        raise ValueError(f"priority {priority} is out of range for a 32-bit integer")
    return priority


def _run_at_expression(run_at: datetime | timedelta | None) -> Any:
    if run_at is None:
        return DbNow()
    if isinstance(run_at, timedelta):
        return db_now_plus(run_at)
    if isinstance(run_at, datetime):
        if timezone.is_naive(run_at):
            raise ValueError("run_at must be timezone-aware (USE_TZ is required)")
        return run_at
    raise TypeError(f"run_at must be a datetime or a timedelta, not {run_at!r}")


def _aware(value: datetime) -> datetime:
    # SQLite hands back naive text for an annotation; the value is UTC (USE_TZ is required).
    return timezone.make_aware(value, UTC) if timezone.is_naive(value) else value


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"
