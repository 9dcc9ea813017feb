"""Exceptions a handler may raise, and the ones the queue raises at you."""

from __future__ import annotations

import traceback
from datetime import timedelta


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


class JobTimeout(BaseException):
    """Raised inside a handler that ran longer than its model's ``queue_timeout``.

    A BaseException, like asyncio's CancelledError, so that a handler's broad
    ``except Exception`` cannot swallow it and keep running."""


class JobCancelled(BaseException):
    """Raised inside a handler whose row an operator asked to cancel (``request_cancel()``),
    at the worker's next check of its claims; the row ends CANCELLED.

    A BaseException like :class:`JobTimeout`, so a broad ``except Exception`` in a handler
    does not swallow it; a handler may catch it to clean up, and should then re-raise."""


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


def describe_error(error: BaseException | str) -> str:
    """The text kept in ``queue_last_error``: the full traceback of an exception."""
    if isinstance(error, BaseException):
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    else:
        text = str(error)
    from .conf import settings

    limit = settings.MAX_ERROR_LENGTH
    if len(text) > limit:
        # Keep the end: the innermost frames and the message explain a failure.
        text = "…[truncated]\n" + text[-limit:]
    return text


class ReplyTimeout(QueueError, TimeoutError):
    """``Message.objects.request()`` got no reply in time. The request and its reply slot
    were removed (a request already running finishes, and its late reply is dropped)."""


class RequestFailed(QueueError):
    """The request's handler failed for good (or was discarded or cancelled) before it replied."""
