"""``QueueRow``: a queue row as the engine sees it, below the engine.

The columns ``QueueMixin`` adds, the class attributes a model sets, the claim an instance
holds, and the hooks the engine calls (``queue_lease_seconds()``, ``queue_retry_policy()``,
``queue_failure_fields()``). The engine (``claims``, ``history``, ``record``, ``rescue``, and
the wings registered into its extension points) annotates rows and models as ``QueueRow``;
``QueueMixin`` (:mod:`django_dbqueue.queue.mixin`) is a ``QueueRow`` with the public API of a
row (its manager, ``process()``, ``enqueue()``, ``mark_succeeded()`` ...), which calls the
engine. So the engine types its rows without importing what calls it: imports, type-only ones
too, go one way (issue #32).

Like the app's own tables it imports nothing of the engine: the foundation and the dialect
seam only.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, ClassVar

from django.db import models
from django.utils import timezone

from ..backends import QueueTimeField
from ..conf import settings
from ..exceptions import LeaseLost
from ..priorities import PRIORITY_RANGE
from ..retry import ExponentialBackoff, RetryPolicy
from ..states import QueueState, validate_queue_state
from .lease import Claim, as_timedelta

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
    "queue_has_error",
)

#: Whether ``queue_last_error`` holds text, as the admin's "has error" filter asks it.
HAS_ERROR = models.ExpressionWrapper(~models.Q(queue_last_error=""), output_field=models.BooleanField())

#: The columns an end needs loaded to know whether its row is in a batch or has dependants
#: (composition's, on the row so that a job in none costs no statement).
COMPOSITION_FIELDS = ("queue_batch", "queue_dependants")

#: The queue times a new row takes from the database's clock (unless it was given them).
CLOCK_FIELDS = ("queue_run_at", "queue_enqueued_at")


class QueueRow(models.Model):
    """The queue's columns and the hooks the engine calls; a model uses
    :class:`~django_dbqueue.models.QueueMixin`, which is one of these (its docstring lists the
    class attributes a model may set)."""

    # No ``choices``: a new state must not need a migration in every app that uses the mixin.
    queue_state = models.CharField(
        "queue state", max_length=16, validators=[validate_queue_state], default=QueueState.READY
    )
    queue_priority = models.IntegerField("priority", default=0, help_text="Higher runs first.")
    # The database's clock at the INSERT unless given (backends/clock.py: QueueTimeField).
    queue_run_at = QueueTimeField("run at", default=timezone.now, help_text="Earliest time the row may run.")
    queue_attempts = models.PositiveIntegerField("attempts", default=0)
    queue_last_error = models.TextField("last error", blank=True, default="")
    queue_last_attempt_at = models.DateTimeField("last attempt at", null=True, blank=True)
    queue_locked_by = models.CharField("locked by", max_length=255, null=True, blank=True)
    queue_locked_until = models.DateTimeField("lease expires", null=True, blank=True)
    queue_token = models.BigIntegerField("claim token", null=True, blank=True, editable=False)
    queue_enqueued_at = QueueTimeField("enqueued at", default=timezone.now)
    queue_finished_at = models.DateTimeField("finished at", null=True, blank=True)
    # Composition (docs/composition.md): on the row, so a job in none costs no statement.
    queue_batch = models.BigIntegerField("batch", null=True, blank=True, db_index=True)
    queue_dependants = models.BooleanField("has dependants", default=False, db_default=False)
    # Kept by the database from queue_last_error, never written: MariaDB/MySQL cannot index a
    # TEXT column without a prefix, so "rows with an error" read a whole row per candidate
    # (760 ms at 10,000,000 orders); this column has an index of its own (QueueMixin.Meta).
    # Stored (db_persist): PostgreSQL has no virtual generated columns before 18.
    queue_has_error = models.GeneratedField(
        expression=HAS_ERROR,
        output_field=models.BooleanField(),
        db_persist=True,
        verbose_name="has error",
    )

    queue_retry: ClassVar[RetryPolicy] = ExponentialBackoff()
    queue_lease: ClassVar[float | timedelta | None] = None
    queue_atomic: ClassVar[bool] = False
    queue_atomic_group: ClassVar[int] = 1
    #: A group runs its handlers without a savepoint each; a failure runs it again with
    #: them (worker/atomic.py) - see the mixin.
    queue_atomic_group_optimistic: ClassVar[bool] = False
    #: Atomic mode: write the success before ``process()`` runs (one statement that locks and
    #: fences the row; rolled back with the handler's writes if it fails) - see the mixin.
    queue_success_first: ClassVar[bool] = True
    queue_timeout: ClassVar[float | None] = None
    queue_limit_key: ClassVar[str | None] = None
    queue_concurrency_limit: ClassVar[int | None] = None
    queue_rate_limit: ClassVar[tuple[int, float | timedelta] | None] = None
    queue_priority_range: ClassVar[tuple[int, int]] = PRIORITY_RANGE

    #: The claim this instance holds (set by ``claim()``; cleared when it ends).
    _queue_claim: Claim | None = None

    class Meta:
        abstract = True

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
        pending = [name for name in CLOCK_FIELDS if hasattr(self.__dict__.get(name), "resolve_expression")]
        if pending:
            # Django 5.2 leaves the expression (DbNow) a new row was inserted with on the
            # instance; Django 6 reads the value back. Read it here (not deferred: a deferred
            # field would turn the next save() of a copy, pk = None, into an UPDATE).
            self.refresh_from_db(using=self._state.db, fields=pending)

    # -- what the engine asks of a row -----------------------------------------------------

    @classmethod
    def queue_lease_seconds(cls) -> timedelta:
        return as_timedelta(cls.queue_lease or settings.LEASE, f"{cls.__name__}.queue_lease")

    def queue_claim(self) -> Claim:
        """The claim this instance holds; LeaseLost if it holds none."""
        if self._queue_claim is None:
            raise LeaseLost(f"{self._meta.label} pk={self.pk} is not claimed by this process")
        return self._queue_claim

    def queue_retry_policy(self) -> RetryPolicy:
        """The retry policy of this row (``queue_retry`` unless a model decides per row)."""
        return type(self).queue_retry

    def queue_failure_fields(self, error: BaseException | str) -> dict[str, Any]:
        """Extra domain columns to write with a failure, in the same fenced UPDATE (a hook:
        e.g. keep a list of errors). The default writes none."""
        return {}
