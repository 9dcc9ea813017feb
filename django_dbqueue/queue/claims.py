"""A claim as the database holds it: the rows it still holds, their locks, a claim taken
over by someone else (the supervisor, a person in the admin). Reads only: every write of a
claim's outcome is :func:`django_dbqueue.queue.record.record`'s."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from django.db import models

from ..backends import DbNow, aware
from ..states import QueueState
from .lease import Claim

if TYPE_CHECKING:
    from .row import QueueRow

#: A queue model's rows: ``adopt()`` returns an instance of the model it is given.
_Row = TypeVar("_Row", bound="QueueRow")


def rows_of(model: type[QueueRow], using: str) -> models.QuerySet:
    return model._base_manager.using(using)


def fenced(model: type[QueueRow], ids: Sequence[Any], claim: Claim) -> models.QuerySet:
    """The rows of ``ids`` still held by ``claim``."""
    return rows_of(model, claim.using).filter(pk__in=list(ids), queue_token=claim.token)


def adopt(
    model: type[_Row], using: str, pk: Any, token: int, worker_id: str, holder: str | None = None
) -> _Row | None:
    """Load a RUNNING row by its claim token and hold that claim, to record its outcome on
    behalf of a worker that is gone (the supervisor) or a person (the admin: ``holder``,
    the claim must be theirs). None if the claim is over."""
    rows = rows_of(model, using).filter(pk=pk, queue_token=token, queue_state=QueueState.RUNNING)
    if holder is not None:
        rows = rows.filter(queue_locked_by=holder)
    row = rows.annotate(_dbqueue_now=DbNow()).first()
    if row is None:
        return None
    claimed_at = aware(row._dbqueue_now)
    del row._dbqueue_now
    row._queue_claim = Claim(
        token=token,
        worker_id=worker_id,
        lease=model.queue_lease_seconds(),
        using=using,
        claimed_at=claimed_at,
    )
    return row


def succeeded(model: type[QueueRow], pk: Any, claim: Claim) -> bool:
    """Whether ``claim`` recorded the row's success (read from the database)."""
    rows = rows_of(model, claim.using).filter(pk=pk, queue_token=-claim.token)
    return rows.filter(queue_state=QueueState.SUCCEEDED).exists()


def ended_cancelled(model: type[QueueRow], pk: Any, claim: Claim) -> bool:
    """Whether the row's cancellation was recorded for ``claim`` (by its lease keeper)."""
    rows = rows_of(model, claim.using).filter(pk=pk, queue_token=-claim.token)
    return rows.filter(queue_state=QueueState.CANCELLED).exists()
