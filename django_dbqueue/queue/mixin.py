"""``QueueMixin``: queue state on any model, so the domain row itself is the queue item.

The engine's floor: a ``QueueRow`` (the columns) with the API of a row over the engine (the
claim's QuerySet, ``record()``). What a row's API offers on behalf of a feature wing (an
enqueue after parents, a unique key's duplicate policy, a request to cancel) goes through the
engine's extension points (:mod:`django_dbqueue.queue.extensions`), which the wings fill from
``AppConfig.ready()``. Public as ``django_dbqueue.models.QueueMixin``.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.apps import apps
from django.core import checks
from django.db import models, router

from ..exceptions import Discard, LeaseLost
from ..priorities import check_priority, check_row_priority
from ..states import QueueState
from . import extensions
from .outcome import End, Outcome
from .queryset import QueueManager, QueueQuerySet, run_at_expression
from .record import record, renew
from .row import QUEUE_FIELDS, QueueRow

#: The index the claim needs: its WHERE and ORDER BY, state first so finished rows are
#: never scanned (checked by a system check; MySQL has no partial indexes).
CLAIM_INDEX_FIELDS = ("queue_state", "-queue_priority", "queue_run_at", "queue_enqueued_at")
#: The index of the admin's "has error" filter: the rows with (or without) an error, so a
#: capped count reads index entries (on InnoDB, in primary-key order within each value, which
#: also serves the newest page: docs/admin-pages.md). Alone, not with the state: this one is
#: written only when an error comes or goes, not at every claim and outcome.
HAS_ERROR_INDEX_FIELDS = ("queue_has_error",)
#: The index of "is a row due?" (an idle worker's probe, and a claim when few rows are due):
#: the claim index orders by priority before the due time, so its range for READY rows holds
#: every parked row (a durable workflow's sleep or wait, a row scheduled for later) and a
#: probe with nothing due read all of them (20,000 index entries, 15 ms, at 20,000 parked
#: rows on MariaDB). Here the due rows are one range of their own, whatever their priority:
#: the probe reads the first entry of it (or none), and a claim with few rows due reads those
#: and sorts them, where the claim index would walk the parked rows after them.
DUE_INDEX_FIELDS = ("queue_state", "queue_run_at")


class QueueMixin(QueueRow):
    """Makes a model a queue: each row is a queue item, ``process()`` is its handler.

    Adds the columns in ``QUEUE_FIELDS``, one composite index that serves the claim and one
    on ``queue_has_error`` (a column the database computes from ``queue_last_error``).
    New rows are READY and due at once; override ``queue_state`` with
    ``default=QueueState.IDLE`` for rows that should wait for ``enqueue()``.

    Class attributes a model may set:

    * ``queue_retry`` - a :class:`~django_dbqueue.retry.RetryPolicy` (default
      ``ExponentialBackoff()``: 8 attempts, 5 s doubling up to an hour);
    * ``queue_lease`` - seconds a claim is valid unless renewed (``DBQUEUE_LEASE``);
    * ``queue_atomic`` - run ``process()`` inside the transaction that records its outcome,
      so its database writes commit exactly once (default False: at-least-once);
    * ``queue_atomic_group`` - in atomic mode, jobs per transaction (each behind a savepoint);
    * ``queue_atomic_group_optimistic`` - run a group's handlers without the savepoints (two
      statements per job fewer); a failing handler rolls the whole group back and the group
      runs again with them, the failed row not again, as do the claim's later groups: the
      handlers before it run twice, so
      their effects outside the database (those not in ``on_commit()``) happen twice
      (default False);
    * ``queue_success_first`` - in atomic mode (one job per transaction, on MariaDB, MySQL and
      PostgreSQL), write the row's success as the transaction's first statement, which also
      locks and fences it, and roll it back with the handler's writes if the handler fails
      (default True: one statement per job fewer). Inside its own transaction the handler then
      reads its row SUCCEEDED; set False for a model whose handler must read its own state as
      RUNNING (``TaskRecord`` does: a running task reads its result RUNNING, as django.tasks
      promises). A durable workflow's handler (``@workflow``) always writes its end after it;
    * ``queue_timeout`` - seconds a single ``process()`` may run (default: no limit);
    * ``queue_history`` - keep a QueueAttempt row per attempt (``DBQUEUE_HISTORY``);
    * ``queue_priority_range`` - the lowest and highest priority the model accepts, as a
      ``(low, high)`` pair (default: what the 32-bit ``queue_priority`` column holds); every
      call that writes a priority refuses others with a ``ValueError``;
    * ``queue_limit_key``, ``queue_concurrency_limit``, ``queue_rate_limit`` - per-key flow
      control in the claim (a field name; RUNNING rows per key; ``(claims, seconds)`` per key):
      see docs/flow-control.md.
    * ``queue_fair_key``, ``queue_fair_weights`` - weighted fair share among keys (tenants) in
      the claim; ``queue_aging`` - seconds after which a due row is taken first: see
      docs/fair-share.md and docs/priority-aging.md.

    A subclass that declares its own ``Meta`` must inherit ``QueueMixin.Meta`` or it loses
    the claim index (a system check says so).

    The row behaves like any Django model. One exception protects a worker's claim: while
    an instance holds a claim (it came from ``claim()`` and its outcome is not recorded),
    its ``save()`` without ``update_fields`` writes the domain fields only, so a handler's
    ``self.save()`` never writes stale queue state over the claim.
    """

    objects = QueueManager()

    class Meta:
        abstract = True
        indexes = [
            models.Index(fields=list(CLAIM_INDEX_FIELDS)),
            models.Index(fields=list(HAS_ERROR_INDEX_FIELDS)),
            models.Index(fields=list(DUE_INDEX_FIELDS)),
        ]

    # -- the handler -----------------------------------------------------------------------

    def process(self) -> None:
        """Do this row's work. Raise to fail the attempt (it is retried by ``queue_retry``),
        raise :class:`~django_dbqueue.exceptions.Discard` to fail for good."""
        # Fail for good at once: no retry can make a missing handler appear.
        raise Discard(f"{type(self).__name__}.process() is not implemented: define it on the model")

    # -- queue API for one row -------------------------------------------------------------

    @classmethod
    def queue_queryset(cls, using: str | None = None) -> QueueQuerySet:
        """A queue QuerySet over all rows, whatever managers the model declares."""
        return QueueQuerySet(model=cls, using=using)

    def enqueue(
        self,
        run_at: datetime | timedelta | None = None,
        priority: int | None = None,
        on_duplicate: str | None = None,
        after: Iterable[QueueMixin] | None = None,
        on_parent_failure: str = "cancel",
    ) -> bool:
        """Queue this row again (READY, attempts cleared), or insert it READY if it is new.

        False if a worker is running it, or if the model has a unique key (see unique.py) that
        an active row holds: ``on_duplicate`` (default ``queue_unique``) then says what
        happens: "ignore", "replace" (the active READY row takes this run time and priority)
        or "raise" (:class:`~django_dbqueue.exceptions.DuplicateJob`).

        With ``after`` (queue rows), the row waits IDLE until they all succeeded, then runs;
        ``on_parent_failure`` says what a parent that fails for good does to it: "cancel" it,
        or "run" it anyway (docs/composition.md). Returns whether it is READY now."""
        if after is not None:
            if run_at is not None or priority is not None or on_duplicate is not None:
                raise ValueError("enqueue(after=...) takes no run_at, priority or on_duplicate")
            return extensions.enqueue_after.only()(self, after, on_parent_failure)
        qs = self.queue_queryset(self._state.db or router.db_for_write(type(self)))
        if self._state.adding:
            if run_at is not None:
                self.queue_run_at = run_at_expression(run_at)
            if priority is not None:
                self.queue_priority = check_priority(priority, type(self))
            check_row_priority(self)  # the instance's own priority too: the row is written with it
            self.queue_state = QueueState.READY

            def insert() -> bool:
                self.save(using=qs.db, force_insert=True)
                return True

            return extensions.write_keyed(self, qs.db, on_duplicate, insert)
        requeue = qs.filter(pk=self.pk)
        done = extensions.write_keyed(
            self, qs.db, on_duplicate, lambda: bool(requeue.enqueue(run_at, priority))
        )
        self.refresh_from_db(using=qs.db, fields=list(QUEUE_FIELDS))
        self._queue_claim = None
        return done

    def request_cancel(self, requested_by: str = "") -> None:
        """Ask the worker running this row to stop it: the handler gets
        :class:`~django_dbqueue.exceptions.JobCancelled` within one lease renewal interval and
        the row ends CANCELLED (see cancellation.py). Raises
        :class:`~django_dbqueue.exceptions.NotRunning` if the row is not RUNNING."""
        extensions.request_cancel.only()(self, requested_by)

    def mark_succeeded(self) -> None:
        """Record success. Raises LeaseLost (writing nothing) if the claim is gone."""
        claim = self.queue_claim()
        if self.pk not in record(type(self), claim, [Outcome.succeeded(self)]):
            raise LeaseLost(f"{self._meta.label} pk={self.pk}: lease lost, success not recorded")
        self._queue_claim = None

    def mark_failed(self, error: BaseException | str) -> datetime | None:
        """Record a failed attempt, keeping its reason (the traceback of an exception).

        Applies ``queue_retry``: returns when the row runs again, or None when it ended
        FAILED. Raises LeaseLost (writing nothing) if the claim is gone."""
        outcome = Outcome.failed(self, error)
        recorded = record(type(self), self.queue_claim(), [outcome])
        if self.pk not in recorded and self.pk not in recorded.already:
            what = "cancellation" if outcome.end is End.CANCELLED else "failure"
            raise LeaseLost(f"{self._meta.label} pk={self.pk}: lease lost, {what} not recorded")
        self._queue_claim = None
        return recorded.retry_at.get(self.pk)

    def release(self) -> None:
        """Give the row back unprocessed: READY again, this attempt not counted."""
        claim = self.queue_claim()
        # The instance gets the values written (READY, the attempt not counted, no claim).
        if self.pk not in record(type(self), claim, [Outcome.given_back(self)]):
            raise LeaseLost(f"{self._meta.label} pk={self.pk}: lease lost, not released")

    def renew_lease(self) -> None:
        """Extend this row's lease by the claim's lease time."""
        claim = self.queue_claim()
        if self.pk not in renew(type(self), [self.pk], claim):
            raise LeaseLost(f"{self._meta.label} pk={self.pk}: lease lost, not renewed")
        self.queue_locked_until = claim.now() + claim.lease


def queue_models() -> list[type[QueueMixin]]:
    """Every installed concrete QueueMixin model."""
    return [m for m in apps.get_models() if issubclass(m, QueueMixin) and not m._meta.abstract]


def queue_model(label: str) -> type[QueueMixin]:
    """The installed concrete QueueMixin model named ``app_label.Model``; ValueError, with a
    sentence to show, for any other name."""
    try:
        model = apps.get_model(label)
    except (LookupError, ValueError):
        raise ValueError(f"unknown model {label!r}: use app_label.ModelName") from None
    if not issubclass(model, QueueMixin) or model._meta.abstract:
        raise ValueError(f"{label} is not a concrete QueueMixin model")
    return model


@checks.register(checks.Tags.models)
def check_app_installed(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Registered on import of the mixin, so it runs even when the app's own checks cannot
    (they are registered by its AppConfig, which exists only once the app is installed)."""
    return app_missing("a model uses QueueMixin")


def app_missing(use: str) -> list[checks.CheckMessage]:
    """Error E000 when ``django_dbqueue`` is not installed: the package needs it (its tables
    are its models); ``use`` says what of it the project uses."""
    if apps.is_installed("django_dbqueue"):
        return []
    return [
        checks.Error(
            f"django_dbqueue is not in INSTALLED_APPS, but {use}.",
            hint="Add 'django_dbqueue' to INSTALLED_APPS: the queue's tables (attempt history, "
            "workers, messages, tasks) and its commands live there.",
            id="django_dbqueue.E000",
        )
    ]
