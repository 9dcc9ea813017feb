"""What flow control adds to the engine, registered into its extension points.

The engine (:mod:`django_dbqueue.queue`) sits below this wing and names what it asks in
:mod:`django_dbqueue.queue.extensions`; :func:`register` (called by
``DbQueueConfig.ready()``) answers: a claim holds back paused queues and keeps per-key
limits, a bulk enqueue of a model with a unique key inserts row by row under its duplicate
policy, the rescue ends CANCELLED the rows someone asked to cancel, and a claim's CANCELLED
end deletes the requests it answered. The QuerySet's ``pause()``, ``resume()`` and
``cancel_running()``, and a row's ``request_cancel()`` and duplicate policy, are carried out
here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..queue import extensions
from . import cancellation, limits, pauses, unique

if TYPE_CHECKING:
    from ..queue.row import QueueRow


def insert_keyed(qs: Any, rows: Sequence[Any], on_duplicate: str | None) -> int | None:
    """A bulk enqueue of a model with a unique key: one INSERT per row, each duplicate under
    the policy; None for a model without one (after checking the policy: a bad one writes
    nothing)."""
    if not unique.keyed(qs.model, on_duplicate):
        return None
    return unique.bulk_enqueue_each(qs, rows, on_duplicate)


def write_keyed(row: Any, using: str, on_duplicate: str | None, write: Callable[[], bool]) -> bool:
    """One row's enqueue under its unique key's duplicate policy: whether it is active now."""
    return unique.enqueue(row, using, on_duplicate, write).created


def cancel_requests(model: type[QueueRow], using: str, rows: Iterable[tuple[Any, Any]]) -> dict[Any, str]:
    """The rescue's question: which expired rows were asked to cancel, with their reason."""
    asked = cancellation.requested_of(model, using, rows)
    return {pk: cancellation.reason(requested_by) for pk, requested_by in asked.items()}


def register() -> None:
    """Register flow control into the engine; idempotent (each name replaces itself)."""
    extensions.claim_filters.register("pauses", pauses.unpaused)
    extensions.claim_gates.register("limits", limits.gate)
    extensions.keyed_inserts.register("unique", insert_keyed)
    extensions.keyed_models.register("unique", unique.keyed)
    extensions.cancel_requests.register("cancellation", cancel_requests)
    extensions.cancelled_in_claim.register("cancellation", cancellation.forget)
    extensions.pause_queue.register("pauses", pauses.pause)
    extensions.resume_queue.register("pauses", pauses.resume)
    extensions.cancel_running.register("cancellation", cancellation.cancel_running)
    extensions.keyed_writes.register("unique", write_keyed)
    extensions.request_cancel.register("cancellation", cancellation.request_cancel)
