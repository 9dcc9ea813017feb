"""Exceptions a handler may raise, and the ones the queue raises at you."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any


class QueueError(Exception):
    """Base class of the errors django_dbqueue raises."""


class LeaseLost(QueueError):
    """The row is no longer held by this claim: its lease ran out and it was rescued, or
    another worker holds it now. The outcome was *not* written."""


class Retry(Exception):
    """Raise from ``process()`` to ask for another attempt after ``delay`` (seconds or a
    timedelta; the retry policy's delay when None). It counts as a failed attempt, so
    ``max_attempts`` still ends a row that keeps asking."""

    def __init__(self, reason: str = "", *, delay: float | timedelta | None = None) -> None:
        super().__init__(reason or "retry requested")
        self.delay = delay


class Discard(Exception):
    """Raise from ``process()`` to fail the row for good (FAILED, no retry) with a reason."""


class WaitTimeout(Discard):
    """Raised by a workflow's ``wait_for()`` whose event did not come before its timeout.

    Catch it to take another path (cancel the order, remind the customer); left uncaught,
    the row ends FAILED with this reason, since no retry brings the event back in time (a
    replay of the workflow raises it again: the timeout is checkpointed)."""


class JobTimeout(BaseException):
    """Raised inside a handler that ran longer than its model's ``queue_timeout``.

    A BaseException, like asyncio's CancelledError, so that a handler's broad
    ``except Exception`` cannot swallow it and keep running."""


class JobCancelled(BaseException):
    """Raised inside a handler whose row an operator asked to cancel (``request_cancel()``),
    at the worker's next check of its claims; the row ends CANCELLED.

    A BaseException like :class:`JobTimeout`, so a broad ``except Exception`` in a handler
    does not swallow it; a handler may catch it to clean up, and should then re-raise."""


class Park(BaseException):
    """Raised from ``process()`` to end this run and park the row: READY again, due at
    ``until`` (a datetime, a delay from the database's clock, or None: now), this attempt not
    counted. What the run did is kept: in atomic mode it commits with the row's new due
    time, in one transaction. ``then`` is called inside that transaction once the row is
    written (its lock held): a durable workflow's wait checks there for an event sent while
    it was parking (docs/howto/workflows.md).

    Raised by :mod:`django_dbqueue.workflows` (``sleep()``, ``wait_for()``, the next step in
    atomic mode). A BaseException like :class:`JobCancelled`, so that a handler's broad
    ``except Exception`` cannot swallow it."""

    def __init__(
        self,
        until: datetime | timedelta | None = None,
        reason: str = "",
        then: Callable[[], None] | None = None,
        due_if: Any = None,
    ) -> None:
        super().__init__(reason or "parked")
        self.until = until
        self.then = then
        #: A condition (an ORM expression, e.g. ``Exists(...)``) under which the park's own
        #: UPDATE makes the row due now instead: a workflow's wait whose events were read
        #: before the row's lock looks there for one sent in between, without a statement.
        self.due_if = due_if


class DuplicateJob(QueueError):
    """Enqueueing a row of a unique model whose key an active (READY/RUNNING) row holds
    already, with the duplicate policy ``"raise"``. Nothing was written."""

    def __init__(self, message: str, existing: object = None) -> None:
        super().__init__(message)
        #: The active row that holds the key.
        self.existing = existing


class NotRunning(QueueError):
    """``request_cancel()`` of a row that is not RUNNING (a READY row is cancelled with
    ``cancel()``; a finished one has nothing left to cancel). Nothing was written."""


class InvalidDependency(QueueError, ValueError):
    """A dependency that cannot be: a parent that does not exist (or is running), a job
    that already waits, a bad policy. Nothing was written (docs/composition.md)."""


class DependencyCycle(InvalidDependency):
    """The dependency would close a cycle (the job is an ancestor of a parent). Nothing was
    written."""


class InvalidCallback(QueueError, TypeError):
    """A batch callback that is not a job: a ``batches.message()``, a task or a queue row.
    Nothing was written."""


class ReplyTimeout(QueueError, TimeoutError):
    """``Message.objects.request()`` got no reply in time. The request and its reply slot
    were removed (a request already running finishes, and its late reply is dropped)."""


class RequestFailed(QueueError):
    """The request's handler failed for good (or was discarded or cancelled) before it replied."""
