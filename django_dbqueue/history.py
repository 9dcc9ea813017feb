"""``QueueAttempt``: an append-only record of every attempt of every queue row.

Written in the same transaction as the outcome it describes (one bulk INSERT per batch of
outcomes), so history and queue state never disagree. Turn it off with
``DBQUEUE_HISTORY = False`` or per model with ``queue_history = False``; prune it with
``manage.py purgequeue --attempts-older-than``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import connections, models

from .conf import settings

if TYPE_CHECKING:
    from .models import QueueMixin

#: Error text kept per attempt (the full traceback stays on the row's queue_last_error).
HISTORY_ERROR_LENGTH = 4000


class AttemptOutcome(models.TextChoices):
    SUCCEEDED = "succeeded", "Succeeded"
    RETRIED = "retried", "Failed, retried later"
    FAILED = "failed", "Failed for good"
    LOST = "lost", "Lease expired (worker lost)"


class QueueAttempt(models.Model):
    model = models.CharField(max_length=100, help_text="The queue model's label, e.g. shop.Order.")
    object_id = models.CharField(max_length=64)
    attempt = models.PositiveIntegerField()
    worker_id = models.CharField(max_length=255, blank=True, default="")
    enqueued_at = models.DateTimeField(null=True)
    due_at = models.DateTimeField(null=True, help_text="queue_run_at when the row was claimed.")
    claimed_at = models.DateTimeField(null=True)
    finished_at = models.DateTimeField()
    outcome = models.CharField(max_length=16, choices=AttemptOutcome.choices)
    error = models.TextField(blank=True, default="")

    class Meta:
        indexes = [
            models.Index(fields=["model", "object_id"], name="dbqueue_attempt_row"),
            models.Index(fields=["finished_at"], name="dbqueue_attempt_finished"),
        ]

    def __str__(self) -> str:
        return f"{self.model} {self.object_id} attempt {self.attempt}: {self.outcome}"


def history_enabled(model: type[QueueMixin]) -> bool:
    own = getattr(model, "queue_history", None)
    return settings.HISTORY if own is None else bool(own)


#: The columns an attempt row is written with, in the order of ``attempt_for``'s tuple.
ATTEMPT_COLUMNS = (
    "model",
    "object_id",
    "attempt",
    "worker_id",
    "enqueued_at",
    "due_at",
    "claimed_at",
    "finished_at",
    "outcome",
    "error",
)
_DATETIMES = (4, 5, 6, 7)

AttemptRow = tuple[Any, ...]


def attempt_for(
    row: QueueMixin, outcome: str, finished_at: datetime, error: str = "", worker_id: str = ""
) -> AttemptRow:
    """The values of one QueueAttempt row (a plain tuple: a batch of them is written with one
    executemany, without building a model instance per attempt)."""
    claim = getattr(row, "_queue_claim", None)
    return (
        row._meta.label,
        str(row.pk),
        row.queue_attempts,
        worker_id or (claim.worker_id if claim else "") or "",
        row.queue_enqueued_at,
        row.queue_run_at,
        row.queue_last_attempt_at,
        finished_at,
        outcome,
        error[-HISTORY_ERROR_LENGTH:],
    )


def write_attempts(model: type[QueueMixin], using: str, attempts: Iterable[AttemptRow]) -> None:
    """Append attempt rows in the current transaction: one multi-row INSERT, no ids asked back.

    Parameters only, through the backend's own datetime adaptation; this path is the hot one
    of every batch outcome, so it skips the ORM's per-field machinery."""
    if not history_enabled(model):
        return
    connection = connections[using]
    adapt = connection.ops.adapt_datetimefield_value
    # The rows of one batch share their claim and finishing times (and often the enqueue
    # time): adapt each distinct datetime once.
    adapted: dict[datetime | None, Any] = {}
    rows = []
    for values in attempts:
        row = list(values)
        for index in _DATETIMES:
            value = row[index]
            try:
                row[index] = adapted[value]
            except KeyError:
                row[index] = adapted[value] = adapt(value)
        rows.append(row)
    if not rows:
        return
    placeholders = ", ".join(["%s"] * len(ATTEMPT_COLUMNS))
    with connection.cursor() as cursor:
        cursor.executemany(f"{_insert_into(using)} VALUES ({placeholders})", rows)


@functools.lru_cache(maxsize=64)
def _insert_into(using: str) -> str:
    """``INSERT INTO <history table> (<ATTEMPT_COLUMNS>)``: the head of every history write."""
    quote = connections[using].ops.quote_name
    columns = ", ".join(quote(name) for name in ATTEMPT_COLUMNS)
    return f"INSERT INTO {quote(QueueAttempt._meta.db_table)} ({columns})"


def _outcome_and_no_error(outcome: str) -> tuple[str, str]:
    """The last two of ATTEMPT_COLUMNS as SQL text: a fixed outcome and an empty error."""
    return f"'{AttemptOutcome(outcome).value}'", "''"


_INTEGER_KEYS = (models.AutoField, models.BigAutoField, models.SmallAutoField, models.IntegerField)


def can_copy_attempts(model: type[QueueMixin]) -> bool:
    """Whether :func:`copy_attempts` can write this model's history: its key must read the
    same as ``str(pk)`` once cast to text (a UUID stored as 32 hex digits on MySQL does not),
    and its queue columns must live in its own table (not in a multi-table parent's)."""
    return isinstance(model._meta.pk, _INTEGER_KEYS) and not model._meta.parents


def copy_attempts(
    model: type[QueueMixin], using: str, ids: Sequence[Any], worker_id: str, outcome: str
) -> None:
    """Append the attempt rows of queue rows just finished in the current transaction, copied
    by the database from the rows themselves (one ``INSERT … SELECT`` by primary key).

    The same values :func:`attempt_for` would send, without escaping ten parameters per row in
    Python: the hot path of lease-mode batches. The caller holds the rows' locks (it has just
    written them), so they read as written."""
    if not ids or not history_enabled(model):
        return
    sql, params = copy_attempts_sql(model, using, ids, worker_id, outcome)
    with connections[using].cursor() as cursor:
        cursor.execute(sql, params)


def copy_attempts_sql(
    model: type[QueueMixin],
    using: str,
    ids: Sequence[Any],
    worker_id: str,
    outcome: str,
    written_by: tuple[Any, Any] | None = None,
) -> tuple[str, list[Any]]:
    """The statement of :func:`copy_attempts`. With ``written_by`` = (token, finished_at), in
    database form, it copies only the rows that carry them: those one outcome write wrote."""
    connection = connections[using]
    prepare_pk = model._meta.pk.get_db_prep_value
    params = [model._meta.label, worker_id, outcome, "", *(prepare_pk(value, connection) for value in ids)]
    if written_by is not None:
        params.extend(written_by)
    return copy_attempts_statement(using, model, len(ids), written_by is not None), params


@functools.lru_cache(maxsize=64)
def attempt_values_statement(using: str, outcome: str) -> str:
    """``INSERT`` of one attempt row with the given outcome and an empty error in the text and
    placeholders for the other columns (``ATTEMPT_COLUMNS[:8]``, in that order).

    Atomic mode's success block writes its one attempt this way rather than by :func:`copy_attempts`:
    an ``INSERT … SELECT`` holds the history table's AUTO-INC lock to the end of the statement
    (``innodb_autoinc_lock_mode`` 1, the default), which workers committing a job at a time
    queue on; a single-row ``INSERT … VALUES`` takes it only for the moment of the id."""
    values = ", ".join((*["%s"] * (len(ATTEMPT_COLUMNS) - 2), *_outcome_and_no_error(outcome)))
    return f"{_insert_into(using)} VALUES ({values})"


@functools.lru_cache(maxsize=512)
def copy_attempts_statement(
    using: str, model: type[QueueMixin], id_count: int | str, fenced: bool, outcome: str | None = None
) -> str:
    """The SQL of :func:`copy_attempts_sql`, cached: atomic mode sends it once per job, and
    building it cost more than sending it. With ``outcome`` (one of AttemptOutcome's values),
    the outcome and an empty error are in the text instead of parameters."""
    connection = connections[using]
    quote = connection.ops.quote_name
    meta = model._meta

    def column(name: str) -> str:
        return quote(meta.get_field(name).column)

    pk = quote(meta.pk.column)
    text = connection.ops.cast_char_field_without_max_length
    selected = ", ".join(
        (
            "%s",
            f"CAST({pk} AS {text})",
            column("queue_attempts"),
            "%s",
            column("queue_enqueued_at"),
            column("queue_run_at"),
            column("queue_last_attempt_at"),
            column("queue_finished_at"),
            *(("%s", "%s") if outcome is None else _outcome_and_no_error(outcome)),
        )
    )
    # id_count placeholders, or a stand-in the caller replaces with integer ids.
    placeholders = id_count if isinstance(id_count, str) else ", ".join(["%s"] * id_count)
    source = f"FROM {quote(meta.db_table)} WHERE {pk} IN ({placeholders})"
    sql = f"{_insert_into(using)} SELECT {selected} {source}"
    if fenced:
        sql += f" AND {column('queue_token')} = %s AND {column('queue_finished_at')} = %s"
    return sql
