"""The attempt history: one ``QueueAttempt`` row per attempt of every queue row.

Written by the outcomes module in the same transaction as the outcome it describes (one
``bulk_create`` per batch of outcomes), so history and queue state never disagree. Turn it
off with ``DBQUEUE_HISTORY = False`` or per model with ``queue_history = False``; prune it
with ``manage.py purgequeue --attempts-older-than``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any, cast

from django.db import connections, models

from ..backends import backend_for, quoted_column
from ..conf import settings
from ..states import AttemptOutcome  # noqa: F401 - its old home: the outcomes import it here
from ..tables.attempt import QueueAttempt

if TYPE_CHECKING:
    from .row import QueueRow


#: Error text kept per attempt (the full traceback stays on the row's queue_last_error).
HISTORY_ERROR_LENGTH = 4000


def history_enabled(model: type[QueueRow]) -> bool:
    own = getattr(model, "queue_history", None)
    return settings.HISTORY if own is None else bool(own)


def attempt_model() -> type[QueueAttempt]:
    return QueueAttempt


#: What ``attempt_for`` reads of a row (for loading rows with ``.only()``).
ATTEMPT_FIELDS = (
    "pk",
    "queue_attempts",
    "queue_locked_by",
    "queue_enqueued_at",
    "queue_run_at",
    "queue_last_attempt_at",
)


def attempt_for(
    row: QueueRow,
    outcome: str,
    finished_at: datetime,
    error: str = "",
    worker_id: str = "",
) -> dict[str, Any]:
    """The field values of the QueueAttempt row of ``row``'s current attempt."""
    return {
        "model": row._meta.label,
        "object_id": str(row.pk),
        "attempt": row.queue_attempts,
        "worker_id": worker_id or row.queue_locked_by or "",
        "enqueued_at": row.queue_enqueued_at,
        "due_at": row.queue_run_at,
        "claimed_at": row.queue_last_attempt_at,
        "finished_at": finished_at,
        "outcome": outcome,
        "error": error[-HISTORY_ERROR_LENGTH:],
    }


def write_attempts(model: type[QueueRow], using: str, attempts: Iterable[dict[str, Any]]) -> None:
    """Append attempt rows in the current transaction, in one INSERT per 500."""
    if not history_enabled(model):
        return
    attempt = attempt_model()
    rows = [attempt(**values) for values in attempts]
    if rows:
        attempt._default_manager.using(using).bulk_create(rows, batch_size=500)


#: The columns of an attempt row, and what ``copy_attempts`` takes each from (a queue column,
#: or ``None`` for a parameter).
_COPIED = (
    ("model", None),
    ("object_id", "pk"),
    ("attempt", "queue_attempts"),
    ("worker_id", "queue_locked_by"),
    ("enqueued_at", "queue_enqueued_at"),
    ("due_at", "queue_run_at"),
    ("claimed_at", "queue_last_attempt_at"),
    ("finished_at", None),
    ("outcome", None),
    ("error", None),
)


def copy_attempts(
    model: type[QueueRow], using: str, ids: Sequence[Any], token: int, outcome: str, finished_at: datetime
) -> int | None:
    """Append the attempt rows of the rows of ``ids`` that carry ``token``, copied by the
    database from the queue rows in one ``INSERT … SELECT`` (no per-row Python: the history
    of a batch of 500 successes costs one statement). Runs in the caller's transaction.
    Returns how many rows it copied (a row deleted meanwhile has none), or None when the
    history is off (nothing sent).

    Identifiers go through ``quote_name()``; every value is a parameter."""
    if not ids or not history_enabled(model):
        return None
    connection = connections[using]
    sql = _copy_statement(model, using).replace(_KEYS, ", ".join(["%s"] * len(ids)))
    when = connection.ops.adapt_datetimefield_value(finished_at)
    params = [model._meta.label, when, outcome, "", *ids, token]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return int(cursor.rowcount)


#: Where the statement's key placeholders go (their number varies per call).
_KEYS = "<keys>"


@lru_cache(maxsize=256)
def _copy_statement(model: type[QueueRow], using: str) -> str:
    """The ``INSERT … SELECT`` of :func:`copy_attempts`, built once per model and database."""
    quote = connections[using].ops.quote_name
    attempt = attempt_model()

    def column(of: type[models.Model], name: str) -> str:
        return quoted_column(connections[using], of, name)

    columns = ", ".join(column(attempt, name) for name, _ in _COPIED)
    key = quote(cast(str, model._meta.pk.column))
    source = {
        "pk": backend_for(using).as_text(key),
        "queue_locked_by": f"COALESCE({column(model, 'queue_locked_by')}, '')",
    }
    selected = ", ".join(
        "%s" if field is None else source.get(field) or column(model, field) for _, field in _COPIED
    )
    return (
        f"INSERT INTO {quote(attempt._meta.db_table)} ({columns}) SELECT {selected} "
        f"FROM {quote(model._meta.db_table)} WHERE {key} IN ({_KEYS}) "
        f"AND {column(model, 'queue_token')} = %s"
    )
