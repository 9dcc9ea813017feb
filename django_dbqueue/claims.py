"""A claim as the database holds it: the rows it still holds, their locks, a claim taken
over by someone else (the supervisor, a person in the admin). Reads only: every write of a
claim's outcome is in :mod:`django_dbqueue.outcomes`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.db import models

from .backends import DbNow, aware
from .leases import Claim
from .states import QueueState

if TYPE_CHECKING:
    from .models import QueueMixin


def rows_of(model: type[QueueMixin], using: str) -> models.QuerySet:
    return model._base_manager.using(using)


def fenced(model: type[QueueMixin], ids: Sequence[Any], claim: Claim) -> models.QuerySet:
    """The rows of ``ids`` still held by ``claim``."""
    return rows_of(model, claim.using).filter(pk__in=list(ids), queue_token=claim.token)


def lock_held(model: type[QueueMixin], ids: Sequence[Any], claim: Claim) -> set[Any]:
    """Lock the rows of ``ids`` still held by ``claim`` (``SELECT … FOR UPDATE`` in the
    caller's transaction); return their ids. Atomic mode runs a handler only behind this
    lock: a rescuer's SKIP LOCKED then passes the row by even if its lease ran out."""
    return set(fenced(model, ids, claim).select_for_update().values_list("pk", flat=True))


def adopt(
    model: type[QueueMixin], using: str, pk: Any, token: int, worker_id: str, holder: str | None = None
) -> QueueMixin | None:
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


def succeeded(model: type[QueueMixin], pk: Any, claim: Claim) -> bool:
    """Whether ``claim`` recorded the row's success (read from the database)."""
    rows = rows_of(model, claim.using).filter(pk=pk, queue_token=-claim.token)
    return rows.filter(queue_state=QueueState.SUCCEEDED).exists()


def ended_cancelled(model: type[QueueMixin], pk: Any, claim: Claim) -> bool:
    """Whether the row's cancellation was recorded for ``claim`` (by its lease keeper)."""
    rows = rows_of(model, claim.using).filter(pk=pk, queue_token=-claim.token)
    return rows.filter(queue_state=QueueState.CANCELLED).exists()
