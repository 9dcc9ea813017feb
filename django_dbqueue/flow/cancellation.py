"""Cancelling a RUNNING row: an operator's request, and how a worker finds it.

1. ``row.request_cancel()`` / ``qs.cancel_running()`` records a :class:`CancelRequest` per
   RUNNING row, naming the row's current claim (its token). The queue row itself is not
   written: its worker may hold its lock (atomic mode) for as long as the handler runs.
2. The worker's lease keeper reads the requests for the claims it holds once per renewal
   interval (one indexed SELECT), raises :class:`~django_dbqueue.exceptions.JobCancelled`
   in the handler, and the row ends CANCELLED by a write fenced by the claim's token
   (``Outcome.cancelled`` written by :func:`django_dbqueue.queue.record.record`): a handler
   that finishes anyway finds its claim gone and its outcome rejected.
3. A row whose worker is dead is ended CANCELLED by the rescue once its lease runs out,
   instead of being retried.

Reads and writes of the request table only; the queue row's outcome is written by ``record()``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from django.db import models, transaction

from ..backends import DbNow
from ..exceptions import NotRunning
from ..states import QueueState
from ..tables.cancel_request import CancelRequest

if TYPE_CHECKING:
    from ..queue.row import QueueRow

#: Request rows deleted per statement.
_CHUNK = 500


def request_model() -> type[CancelRequest]:
    return CancelRequest


def label_of(model: type[QueueRow]) -> str:
    # The concrete model's: a proxy's rows are its concrete model's rows.
    return model._meta.concrete_model._meta.label  # type: ignore[union-attr]


def _requests(using: str) -> models.QuerySet:
    return request_model()._default_manager.using(using)


def cancel_running(qs: models.QuerySet, requested_by: str = "") -> int:
    """Ask the workers running the RUNNING rows of ``qs`` to cancel them; return how many rows
    were asked. Rows in any other state are left as they are (``cancel()`` ends READY ones)."""
    using, label = qs.db, label_of(qs.model)
    with transaction.atomic(using=using):
        running = list(qs.filter(queue_state=QueueState.RUNNING).values_list("pk", "queue_token"))
        if not running:
            return 0
        ids = [str(pk) for pk, _ in running]
        for start in range(0, len(ids), _CHUNK):
            # A request left from an earlier claim of the row is replaced by this one.
            _requests(using).filter(model=label, object_id__in=ids[start : start + _CHUNK]).delete()
        model = request_model()
        _requests(using).bulk_create(
            [
                model(
                    model=label,
                    object_id=str(pk),
                    token=token,
                    requested_by=requested_by,
                    requested_at=DbNow(),
                )
                for pk, token in running
            ],
            batch_size=_CHUNK,
            ignore_conflicts=True,  # an operator racing with another asks for the same thing
        )
    return len(running)


def request_cancel(row: QueueRow, requested_by: str = "") -> None:
    """Ask the worker running ``row`` to cancel it. Raises :class:`NotRunning` (writing
    nothing) when the row is not RUNNING."""
    using = row._state.db or "default"
    # The base manager, as everywhere in the engine: unfiltered, like the queue QuerySet
    # ``queue_queryset()`` builds, and known to a ``QueueRow`` (the engine does not import
    # the mixin that calls it).
    this = type(row)._base_manager.using(using).filter(pk=row.pk)
    if not cancel_running(this, requested_by):
        state = this.values_list("queue_state", flat=True)
        found = next(iter(state), None)
        raise NotRunning(
            f"{row._meta.label} pk={row.pk} is {found or 'gone'}, not running: nothing to cancel"
            + (" (a READY row is cancelled with cancel())" if found == QueueState.READY else "")
        )


def requested(model: type[QueueRow], using: str, token: int) -> dict[str, str]:
    """The rows of the claim ``token`` someone asked to cancel: object id -> who asked."""
    found = _requests(using).filter(token=token, model=label_of(model))
    return dict(found.values_list("object_id", "requested_by"))


def requested_of(model: type[QueueRow], using: str, rows: Iterable[tuple[Any, Any]]) -> dict[Any, str]:
    """Of ``rows`` (pk, token), the ones with a request for that very claim: pk -> who asked."""
    wanted = {str(pk): (pk, token) for pk, token in rows}
    if not wanted:
        return {}
    found = _requests(using).filter(model=label_of(model), object_id__in=list(wanted))
    return {
        wanted[object_id][0]: by
        for object_id, token, by in found.values_list("object_id", "token", "requested_by")
        if wanted[object_id][1] == token
    }


def forget(model: type[QueueRow], using: str, ids: Iterable[Any]) -> None:
    """Delete the requests of rows whose cancellation is written (in the caller's transaction)."""
    keys = [str(pk) for pk in ids]
    for start in range(0, len(keys), _CHUNK):
        _requests(using).filter(model=label_of(model), object_id__in=keys[start : start + _CHUNK]).delete()


def reason(requested_by: str) -> str:
    return "cancelled while running" + (f", as {requested_by} asked" if requested_by else " on request")
