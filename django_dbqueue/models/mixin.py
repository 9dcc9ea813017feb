"""``QueueMixin``: queue state on any model, so the domain row itself is the queue item."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, ClassVar

from django.apps import apps
from django.core import checks
from django.db import models, router
from django.utils import timezone

from .. import cancellation, chains, outcomes, unique
from ..conf import settings
from ..exceptions import Discard, LeaseLost
from ..leases import Claim, as_timedelta
from ..query import QueueManager, QueueQuerySet, check_priority, run_at_expression
from ..retry import ExponentialBackoff, RetryPolicy
from ..states import QueueState

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
    "queue_batch",
    "queue_dependants",
)

#: The index the claim needs: its WHERE and ORDER BY, state first so finished rows are
#: never scanned (checked by a system check; MySQL has no partial indexes).
CLAIM_INDEX_FIELDS = ("queue_state", "-queue_priority", "queue_run_at", "queue_enqueued_at")


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
    * ``queue_atomic_group`` - in atomic mode, jobs per transaction (each behind a savepoint);
    * ``queue_timeout`` - seconds a single ``process()`` may run (default: no limit);
    * ``queue_history`` - keep a QueueAttempt row per attempt (``DBQUEUE_HISTORY``);
    * ``queue_limit_key``, ``queue_concurrency_limit``, ``queue_rate_limit`` - per-key flow
      control in the claim (a field name; RUNNING rows per key; ``(claims, seconds)`` per key):
      see docs/flow-control.md.

    A subclass that declares its own ``Meta`` must inherit ``QueueMixin.Meta`` or it loses
    the claim index (a system check says so).

    The row behaves like any Django model. One exception protects a worker's claim: while
    an instance holds a claim (it came from ``claim()`` and its outcome is not recorded),
    its ``save()`` without ``update_fields`` writes the domain fields only, so a handler's
    ``self.save()`` never writes stale queue state over the claim.
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
    # Composition (docs/composition.md): on the row, so a job in none costs no statement.
    queue_batch = models.BigIntegerField("batch", null=True, blank=True, db_index=True)
    queue_dependants = models.BooleanField("has dependants", default=False, db_default=False)

    objects = QueueManager()

    queue_retry: ClassVar[RetryPolicy] = ExponentialBackoff()
    queue_lease: ClassVar[float | timedelta | None] = None
    queue_atomic: ClassVar[bool] = False
    queue_atomic_group: ClassVar[int] = 1
    queue_timeout: ClassVar[float | None] = None
    queue_limit_key: ClassVar[str | None] = None
    queue_concurrency_limit: ClassVar[int | None] = None
    queue_rate_limit: ClassVar[tuple[int, float | timedelta] | None] = None

    #: The claim this instance holds (set by ``claim()``; cleared when it ends).
    _queue_claim: Claim | None = None

    class Meta:
        abstract = True
        indexes = [models.Index(fields=list(CLAIM_INDEX_FIELDS))]

    # -- the handler -----------------------------------------------------------------------

    def process(self) -> None:
        """Do this row's work. Raise to fail the attempt (it is retried by ``queue_retry``),
        raise :class:`~django_dbqueue.exceptions.Discard` to fail for good."""
        # Fail for good at once: no retry can make a missing handler appear.
        raise Discard(f"{type(self).__name__}.process() is not implemented: define it on the model")

    # -- saving ----------------------------------------------------------------------------

    def save(self, *args: Any, **kwargs: Any) -> None:
        if (
            self._queue_claim is not None
            and not self._state.adding
            and self.pk is not None
            and not args
            and kwargs.get("update_fields") is None
            and not kwargs.get("force_insert")
        ):
            # A claimed row's queue columns belong to its worker (renewals move the lease
            # on under this instance's feet): write what the handler may change.
            deferred = self.get_deferred_fields()
            kwargs["update_fields"] = [
                f.attname
                for f in self._meta.concrete_fields
                if not f.primary_key and f.name not in QUEUE_FIELDS and f.attname not in deferred
            ]
        super().save(*args, **kwargs)

    # -- queue API for one row -------------------------------------------------------------

    @classmethod
    def queue_queryset(cls, using: str | None = None) -> QueueQuerySet:
        """A queue QuerySet over all rows, whatever managers the model declares."""
        return QueueQuerySet(model=cls, using=using)

    @classmethod
    def queue_lease_seconds(cls) -> timedelta:
        return as_timedelta(cls.queue_lease or settings.LEASE, f"{cls.__name__}.queue_lease")

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
            return chains.enqueue_after(self, after, on_parent_failure)
        qs = self.queue_queryset(self._state.db or router.db_for_write(type(self)))
        if self._state.adding:
            if run_at is not None:
                self.queue_run_at = run_at_expression(run_at)
            if priority is not None:
                self.queue_priority = check_priority(priority)
            return unique.enqueue_new(qs, self, on_duplicate).created
        requeue = qs.filter(pk=self.pk)
        done = unique.enqueue(self, qs.db, on_duplicate, lambda: requeue.enqueue(run_at, priority))
        self.refresh_from_db(using=qs.db, fields=list(QUEUE_FIELDS))
        self._queue_claim = None
        return done.created

    def request_cancel(self, requested_by: str = "") -> None:
        """Ask the worker running this row to stop it: the handler gets
        :class:`~django_dbqueue.exceptions.JobCancelled` within one lease renewal interval and
        the row ends CANCELLED (see cancellation.py). Raises
        :class:`~django_dbqueue.exceptions.NotRunning` if the row is not RUNNING."""
        cancellation.request_cancel(self, requested_by)

    def queue_claim(self) -> Claim:
        """The claim this instance holds; LeaseLost if it holds none."""
        if self._queue_claim is None:
            raise LeaseLost(f"{self._meta.label} pk={self.pk} is not claimed by this process")
        return self._queue_claim

    def mark_succeeded(self) -> None:
        """Record success. Raises LeaseLost (writing nothing) if the claim is gone."""
        claim = self.queue_claim()
        if outcomes.succeed(type(self), [self], claim):
            raise LeaseLost(f"{self._meta.label} pk={self.pk}: lease lost, success not recorded")
        self._queue_claim = None

    def mark_failed(self, error: BaseException | str) -> datetime | None:
        """Record a failed attempt, keeping its reason (the traceback of an exception).

        Applies ``queue_retry``: returns when the row runs again, or None when it ended
        FAILED. Raises LeaseLost (writing nothing) if the claim is gone."""
        retry_at = outcomes.fail(self, self.queue_claim(), error)
        self._queue_claim = None
        return retry_at

    def queue_retry_policy(self) -> RetryPolicy:
        """The retry policy of this row (``queue_retry`` unless a model decides per row)."""
        return type(self).queue_retry

    def queue_failure_fields(self, error: BaseException | str) -> dict[str, Any]:
        """Extra domain columns to write with a failure, in the same fenced UPDATE (a hook:
        e.g. keep a list of errors). The default writes none."""
        return {}

    def release(self) -> None:
        """Give the row back unprocessed: READY again, this attempt not counted."""
        claim = self.queue_claim()
        if not outcomes.release(type(self), [self.pk], claim):
            raise LeaseLost(f"{self._meta.label} pk={self.pk}: lease lost, not released")
        self.queue_state = QueueState.READY
        self.queue_attempts -= 1
        self.queue_token = self.queue_locked_by = self.queue_locked_until = None
        self._queue_claim = None

    def renew_lease(self) -> None:
        """Extend this row's lease by the claim's lease time."""
        claim = self.queue_claim()
        if self.pk not in outcomes.renew(type(self), [self.pk], claim):
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
    if apps.is_installed("django_dbqueue"):
        return []
    return [
        checks.Error(
            "django_dbqueue is not in INSTALLED_APPS, but a model uses QueueMixin.",
            hint="Add 'django_dbqueue' to INSTALLED_APPS: the queue's tables (attempt history, "
            "workers, messages, tasks) and its commands live there.",
            id="django_dbqueue.E000",
        )
    ]
