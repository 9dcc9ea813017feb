"""``QueueMixin``: queue state on any model, so the domain row itself is the queue item."""

from __future__ import annotations

import functools
import logging
import operator
import traceback
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, ClassVar

from django.apps import apps
from django.db import connections, models, router, transaction
from django.db.models.signals import post_save, pre_save
from django.utils import timezone

from . import signals
from .conf import settings
from .exceptions import Discard, LeaseLost, Retry
from .insert import insert_plan
from .query import Claim, QueueManager, QueueQuerySet, as_timedelta
from .retry import ExponentialBackoff, RetryPolicy
from .states import QueueState

logger = logging.getLogger("django_dbqueue.models")

#: The columns QueueMixin adds; all of them start with ``queue_``.
QUEUE_FIELDS = (
    "queue_state",
    "queue_priority",
    "queue_run_at",
    "queue_attempts",
    "queue_last_error",
    "queue_last_attempt_at",
    "queue_locked_by",
    "queue_locked_until",
    "queue_token",
    "queue_enqueued_at",
    "queue_finished_at",
)

#: The arguments of a ``save()`` the new-row path takes (any others: ``Model.save()``).
NEW_ROW_SAVE_ARGS = frozenset({"using", "force_insert"})

#: The leading columns of the index the claim needs (checked by a system check).
CLAIM_INDEX_FIELDS = ("queue_state", "-queue_priority", "queue_run_at")


class QueueMixin(models.Model):
    """Makes a model a queue: each row is a queue item, ``process()`` is its handler.

    Adds the columns in ``QUEUE_FIELDS`` and one composite index that serves the claim.
    New rows are READY and due at once; override ``queue_state`` with
    ``default=QueueState.IDLE`` for rows that should wait for ``enqueue()``.

    Class attributes a model may set:

    * ``queue_retry`` - a :class:`~django_dbqueue.retry.RetryPolicy` (default
      ``ExponentialBackoff()``: 8 attempts, 5 s doubling up to an hour);
    * ``queue_lease`` - seconds a claim is valid unless renewed (``DBQUEUE_LEASE``);
    * ``queue_atomic`` - run ``process()`` inside the transaction that records its outcome,
      so its database writes commit exactly once (default False: at-least-once);
    * ``queue_timeout`` - seconds a single ``process()`` may run (default: no limit).

    A subclass that declares its own ``Meta`` must inherit ``QueueMixin.Meta`` or it loses
    the claim index (a system check says so).

    Queue columns belong to the queue API: a plain ``save()`` of an existing row writes the
    domain fields only, so a handler's ``self.save()`` or an edit in a form can never write
    stale queue state over a worker's claim. Name queue fields in ``update_fields`` to
    write them on purpose.
    """

    queue_state = models.CharField(
        "queue state", max_length=16, choices=QueueState.choices, default=QueueState.READY
    )
    queue_priority = models.IntegerField("priority", default=0, help_text="Higher runs first.")
    queue_run_at = models.DateTimeField(
        "run at", default=timezone.now, help_text="Earliest time the row may run."
    )
    queue_attempts = models.PositiveIntegerField("attempts", default=0)
    queue_last_error = models.TextField("last error", blank=True, default="")
    queue_last_attempt_at = models.DateTimeField("last attempt at", null=True, blank=True)
    queue_locked_by = models.CharField("locked by", max_length=255, null=True, blank=True)
    queue_locked_until = models.DateTimeField("lease expires", null=True, blank=True)
    queue_token = models.BigIntegerField("claim token", null=True, blank=True, editable=False)
    queue_enqueued_at = models.DateTimeField("enqueued at", default=timezone.now)
    queue_finished_at = models.DateTimeField("finished at", null=True, blank=True)

    objects = QueueManager()

    queue_retry: ClassVar[RetryPolicy] = ExponentialBackoff()
    queue_lease: ClassVar[float | timedelta | None] = None
    queue_atomic: ClassVar[bool] = False
    queue_timeout: ClassVar[float | None] = None

    class Meta:
        abstract = True
        indexes = [models.Index(fields=list(CLAIM_INDEX_FIELDS))]

    # -- the handler -----------------------------------------------------------------------

    def process(self) -> None:
        """Do this row's work. Raise to fail the attempt (it is retried by ``queue_retry``),
        raise :class:`~django_dbqueue.exceptions.Discard` to fail for good."""
        raise NotImplementedError(f"{type(self).__name__}.process() is not implemented")

    # -- saving ----------------------------------------------------------------------------

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self._state.adding:
            force_insert = kwargs.get("force_insert", False)
            if not args and kwargs.keys() <= NEW_ROW_SAVE_ARGS and type(force_insert) is bool:
                self._queue_save_new_row(kwargs.get("using"), force_insert)
                return
        elif kwargs.get("update_fields") is None and not kwargs.get("force_insert") and not args:
            kwargs["update_fields"] = self._queue_domain_field_names()
        super().save(*args, **kwargs)

    def _queue_save_new_row(self, using: str | None, force_insert: bool) -> None:
        """``Model.save()`` of a new row, step for step (related fields checked, router,
        ``pre_save``, the INSERT, ``_state``, ``post_save``), with the INSERT from a
        statement built once (:mod:`django_dbqueue.insert`). A row Django must write itself
        (a primary key already set, a model or value the plan does not cover, a subclass
        that overrides Django's save steps) takes ``Model.save()`` or its ``_save_table()``."""
        origin = type(self)
        meta = self._meta
        if getattr(self, meta.pk.attname) is not None or not _save_steps_are_djangos(origin):
            super().save(
                using=using, force_insert=force_insert
            )  # UPDATE-or-INSERT by the key, or someone else's steps
            return
        if _has_related_fields(origin):  # else Django's step is a loop that does nothing
            self._prepare_related_fields_for_save(operation_name="save")
        using = using or router.db_for_write(origin, instance=self)
        connection = connections[using]
        plan = insert_plan(meta.concrete_model, connection)
        if plan is None or not self.__dict__.keys() >= plan.attnames:  # deferred fields: Django's rules
            super().save(using=using, force_insert=force_insert)
            return
        pre_save.send(sender=origin, instance=self, raw=False, using=using, update_fields=None)
        try:  # transaction.mark_for_rollback_on_error(), without a generator per save()
            if not plan.insert_one(self, connection):  # an expression as a value
                self._save_table(cls=meta.concrete_model, using=using)
        except Exception as exc:
            if connection.in_atomic_block:
                connection.needs_rollback = True
                connection.rollback_exc = exc
            raise
        self._state.db = using
        self._state.adding = False
        post_save.send(sender=origin, instance=self, created=True, update_fields=None, raw=False, using=using)

    @classmethod
    def _queue_domain_field_names(cls) -> list[str]:
        return [f.name for f in cls._meta.concrete_fields if not f.primary_key and f.name not in QUEUE_FIELDS]

    # -- queue API for one row -------------------------------------------------------------

    @classmethod
    def queue_queryset(cls, using: str | None = None) -> QueueQuerySet:
        """A queue QuerySet over all rows, whatever managers the model declares."""
        return QueueQuerySet(model=cls, using=using)

    @classmethod
    def queue_lease_seconds(cls) -> timedelta:
        return as_timedelta(cls.queue_lease or settings.LEASE, f"{cls.__name__}.queue_lease")

    def enqueue(self, run_at: datetime | timedelta | None = None, priority: int | None = None) -> bool:
        """Queue this row again (READY, attempts cleared). False if a worker is running it."""
        using = self._state.db or "default"
        done = self.queue_queryset(using).filter(pk=self.pk).enqueue(run_at, priority) == 1
        self.refresh_from_db(using=using, fields=list(QUEUE_FIELDS))
        return done

    def _queue_claim_or_raise(self) -> Claim:
        claim: Claim | None = getattr(self, "_queue_claim", None)
        if claim is None:
            raise LeaseLost(f"{self._meta.label} pk={self.pk} was not claimed by this process")
        return claim

    def mark_succeeded(self) -> None:
        """Record success. Raises LeaseLost (writing nothing) if the claim is gone."""
        lost = record_successes(type(self), [self], self._queue_claim_or_raise())
        if lost:
            raise LeaseLost(f"{self._meta.label} pk={self.pk}: lease lost, success not recorded")

    def mark_failed(self, error: BaseException | str) -> datetime | None:
        """Record a failed attempt, keeping its reason (the traceback of an exception).

        Applies ``queue_retry``: returns when the row runs again, or None when it ended
        FAILED. Raises LeaseLost (writing nothing) if the claim is gone."""
        claim = self._queue_claim_or_raise()
        retry_at = self._queue_next_run_at(error, claim)
        text = describe_error(error)
        qs = self.queue_queryset(claim.using)
        extra = self.queue_failure_fields(error)
        if not qs._record_failure(self, claim, text, retry_at, extra):
            logger.warning(
                "late outcome rejected: %s pk=%s failed on worker %s, but its lease was lost",
                self._meta.label,
                self.pk,
                claim.worker_id,
            )
            raise LeaseLost(f"{self._meta.label} pk={self.pk}: lease lost, failure not recorded")
        self.queue_last_error = text
        self.queue_locked_until = None
        if retry_at is None:
            self.queue_state = QueueState.FAILED
            self.queue_finished_at = claim.now()
            self.queue_token = -claim.token
        else:
            self.queue_state = QueueState.READY
            self.queue_run_at = retry_at
            self.queue_token = None
            self.queue_locked_by = None
            self._queue_claim = None
        # Receivers hear of it once it is committed (at once outside a transaction).
        transaction.on_commit(
            lambda: signals.job_failed.send(type(self), row=self, error=error, retry_at=retry_at),
            using=claim.using,
        )
        return retry_at

    def queue_failure_fields(self, error: BaseException | str) -> dict[str, Any]:
        """Extra domain columns to write with a failure, in the same fenced UPDATE (a hook:
        e.g. keep a list of errors). The default writes none."""
        return {}

    def _queue_next_run_at(self, error: BaseException | str, claim: Claim) -> datetime | None:
        if isinstance(error, Discard):
            return None
        policy = type(self).queue_retry
        exc = error if isinstance(error, BaseException) else None
        if isinstance(error, Retry) and error.delay is not None:
            if policy.max_attempts is not None and self.queue_attempts >= policy.max_attempts:
                return None
            return claim.now() + as_timedelta(error.delay, "Retry.delay")
        delay = policy.delay(self.queue_attempts, exc)
        return None if delay is None else claim.now() + delay

    def release(self) -> None:
        """Give the row back unprocessed: READY again, this attempt not counted."""
        claim = self._queue_claim_or_raise()
        if not self.queue_queryset(claim.using)._record_release([self.pk], claim):
            raise LeaseLost(f"{self._meta.label} pk={self.pk}: lease lost, not released")
        self.queue_state = QueueState.READY
        self.queue_attempts -= 1
        self.queue_token = self.queue_locked_by = self.queue_locked_until = None
        self._queue_claim = None

    def renew_lease(self) -> None:
        """Extend this row's lease by the claim's lease time."""
        claim = self._queue_claim_or_raise()
        if self.pk not in self.queue_queryset(claim.using)._renew([self.pk], claim):
            raise LeaseLost(f"{self._meta.label} pk={self.pk}: lease lost, not renewed")
        self.queue_locked_until = claim.now() + claim.lease


def record_successes(model: type[QueueMixin], rows: Sequence[QueueMixin], claim: Claim) -> list[QueueMixin]:
    """Mark ``rows`` (all of one claim) SUCCEEDED in one UPDATE; return the rows whose claim
    was lost (their late outcome is rejected and logged, not written)."""
    written = model.queue_queryset(claim.using)._record_successes(rows, claim)
    return successes_written(model, rows, written, claim)


def successes_written(
    model: type[QueueMixin],
    rows: Sequence[QueueMixin],
    written: set[Any],
    claim: Claim,
    finished_at: datetime | None = None,
) -> list[QueueMixin]:
    """After a success write: bring the written rows up to date, log the rejected ones, tell
    ``job_succeeded`` receivers (once committed); return the rows whose claim was lost."""
    finished_at = finished_at or claim.now()
    lost, won = [], []
    pk_of = operator.attrgetter(model._meta.pk.attname)  # ``row.pk`` is a property: slower per row
    token = -claim.token
    for row in rows:
        if pk_of(row) not in written:
            lost.append(row)
            logger.warning(
                "late outcome rejected: %s pk=%s succeeded on worker %s, but its lease was lost",
                model._meta.label,
                row.pk,
                claim.worker_id,
            )
            continue
        row.queue_state = QueueState.SUCCEEDED
        row.queue_token = token
        row.queue_finished_at = finished_at
        row.queue_locked_until = None
        row.queue_last_error = ""
        won.append(row)
    if won and logger.isEnabledFor(logging.DEBUG):
        for row in won:
            logger.debug("%s pk=%s succeeded (attempt %s)", model._meta.label, row.pk, row.queue_attempts)
    if won and signals.job_succeeded.has_listeners(model):
        transaction.on_commit(
            lambda: [signals.job_succeeded.send(model, row=row) for row in won], using=claim.using
        )
    return lost


def describe_error(error: BaseException | str) -> str:
    """The text kept in ``queue_last_error``: the full traceback of an exception."""
    if isinstance(error, BaseException):
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    else:
        text = str(error)
    limit = settings.MAX_ERROR_LENGTH
    if len(text) > limit:
        # Keep the end: the innermost frames and the message are what explain a failure.
        text = "…[truncated]\n" + text[-limit:]
    return text


@functools.cache
def _has_related_fields(model: type[models.Model]) -> bool:
    """Whether ``_prepare_related_fields_for_save()`` has anything to look at in ``model``: a
    relation among its concrete fields, or a private field (a GenericForeignKey)."""
    meta = model._meta
    return any(field.is_relation for field in meta.concrete_fields) or bool(meta.private_fields)


@functools.cache
def _save_steps_are_djangos(model: type[models.Model]) -> bool:
    """Whether ``model`` keeps Django's own save steps, which the new-row path stands in for
    (asked once per model: a class's methods are set when it is defined)."""
    return all(
        getattr(model, name) is getattr(models.Model, name)
        for name in ("save_base", "_save_parents", "_save_table", "_do_insert", "_do_update")
    )


def queue_models() -> list[type[QueueMixin]]:
    """Every installed concrete QueueMixin model."""
    return [m for m in apps.get_models() if issubclass(m, QueueMixin) and not m._meta.abstract]


# Concrete models of this app live in their own modules; import them so Django registers them.
from .history import QueueAttempt  # noqa: E402, F401
from .messages import ArchivedMessage, Message  # noqa: E402, F401
from .registry import WorkerProcess  # noqa: E402, F401
from .task_records import TaskRecord  # noqa: E402, F401
