"""How one claimed row's attempt ends, as a value.

A worker, the rescue, the admin's "people as consumers", the lease keeper and the instance
methods of ``QueueMixin`` each *decide* an end; none of them writes it. They build an
:class:`Outcome` with one of its named constructors and hand it to
:func:`django_dbqueue.queue.record.record`, the one writer of queue columns after a claim.
So every end gets the same fencing (the claim's token), the same attempt row, the same
composition and cancellation hooks and the same signal, and a new end is one constructor and
one writer group, not a recipe copied into every caller.

The table of ends (state, token, attempt row, signal) is in docs/explanation/fencing.md.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import TYPE_CHECKING, Any, NamedTuple

from ..exceptions import JobCancelled
from ..tracebacks import describe_error

if TYPE_CHECKING:
    from .row import QueueRow


class End(Enum):
    """The kinds of end a claim can have; each is one group in :func:`record`."""

    #: The handler returned: SUCCEEDED, token negated, a "succeeded" attempt row.
    SUCCEEDED = "succeeded"
    #: The handler raised: the row's retry policy makes it READY again (a "retried" attempt,
    #: ``job_failed`` with its ``retry_at``) or FAILED for good ("failed", ``retry_at=None``).
    FAILED = "failed"
    #: READY again at once, to be claimed by itself, whatever the retry policy says: one of
    #: the handlers run with it harmed the worker, and it may not have been this one.
    RETRIED_ALONE = "retried alone"
    #: Put off to ``until``, this attempt not counted (no attempt row, no signal).
    DEFERRED = "deferred"
    #: Given back unprocessed: READY now, this attempt not counted (no attempt row, no signal).
    GIVEN_BACK = "given back"
    #: Ended on an operator's request: CANCELLED, the request deleted, ``job_cancelled``.
    CANCELLED = "cancelled"
    #: The row's data cannot become an instance: FAILED by its key, no retry can help it.
    UNLOADABLE = "unloadable"
    #: Its lease ran out (its worker crashed, was killed or hung): READY again alone, or FAILED
    #: when ``final`` (its attempts are used up); a "lost" attempt row either way.
    EXPIRED = "expired"
    #: It committed, then an ``on_commit()`` hook raised: still SUCCEEDED, the error kept.
    HOOK_FAILED = "hook failed"


class Outcome(NamedTuple):
    """One row's end, decided; :func:`~django_dbqueue.queue.record.record` writes it.

    Build one with a named constructor, never directly. ``row`` is the instance when the
    decider has it (its fields go into the attempt row and it gets the written values);
    the lease keeper and the claim of a row that cannot load know only ``pk``.

    Immutable as a value should be. A named tuple rather than a frozen dataclass: a lease-mode
    worker makes one per job, and a frozen dataclass's ``__init__`` sets each of its ten
    fields through ``object.__setattr__`` (about five times the cost of a tuple's, issue
    #33)."""

    end: End
    pk: Any
    row: QueueRow | None = None
    error: BaseException | str = ""
    until: datetime | None = None
    alone: bool = False
    final: bool = False
    #: The attempt row's error when it differs from the row's (the rescue's short reason).
    attempt_error: str | None = None
    #: A deferral of a row whose success atomic mode wrote first, in the same transaction
    #: (``fence_success``): its UPDATE turns that success into the park, in place.
    in_place: bool = False
    #: A deferral's condition for being due now instead (``Park.due_if``).
    due_if: Any = None

    @property
    def reason(self) -> str:
        """The error as the row keeps it: an exception's traceback, or the text given."""
        return describe_error(self.error) if self.error != "" else ""

    # -- named constructors ------------------------------------------------------------------

    @classmethod
    def succeeded(cls, row: QueueRow) -> Outcome:
        return cls(End.SUCCEEDED, row.pk, row)

    @classmethod
    def failed(cls, row: QueueRow, error: BaseException | str, alone: bool = False) -> Outcome:
        """The handler raised ``error``; with ``alone`` a retry is claimed by itself. A
        :class:`~django_dbqueue.exceptions.JobCancelled` is the operator's request, not the
        handler's failure: it ends CANCELLED, with no retry."""
        if isinstance(error, JobCancelled):
            return cls.cancelled(row, str(error))
        return cls(End.FAILED, row.pk, row, error=error, alone=alone)

    @classmethod
    def retried_alone(cls, row: QueueRow, error: BaseException | str) -> Outcome:
        return cls(End.RETRIED_ALONE, row.pk, row, error=error, alone=True)

    @classmethod
    def deferred(
        cls, row: QueueRow | Any, until: datetime, in_place: bool = False, due_if: Any = None
    ) -> Outcome:
        return cls(End.DEFERRED, _pk(row), _row(row), until=until, in_place=in_place, due_if=due_if)

    @classmethod
    def given_back(cls, row: QueueRow | Any, alone: bool = False) -> Outcome:
        return cls(End.GIVEN_BACK, _pk(row), _row(row), alone=alone)

    @classmethod
    def cancelled(cls, row: QueueRow | Any, reason: str) -> Outcome:
        return cls(End.CANCELLED, _pk(row), _row(row), error=reason, final=True)

    @classmethod
    def unloadable(cls, pk: Any, reason: str) -> Outcome:
        return cls(End.UNLOADABLE, pk, None, error=reason, final=True)

    @classmethod
    def expired(cls, row: QueueRow, reason: str, final: bool, attempt_error: str | None = None) -> Outcome:
        """The rescue's end of a row whose lease ran out: READY alone again, or FAILED with
        ``final``. ``attempt_error`` is what its "lost" attempt row says, if not ``reason``."""
        return cls(End.EXPIRED, row.pk, row, error=reason, final=final, attempt_error=attempt_error)

    @classmethod
    def hook_failed(cls, row: QueueRow, error: BaseException) -> Outcome:
        return cls(End.HOOK_FAILED, row.pk, row, error=error)


def _pk(row: Any) -> Any:
    return getattr(row, "pk", row)


def _row(row: Any) -> Any:
    return row if hasattr(row, "_meta") else None


__all__ = ["End", "Outcome"]
