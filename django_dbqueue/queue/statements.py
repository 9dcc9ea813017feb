"""The statements a worker sends for every job, built once per model and database.

Through the ORM each job's fenced ``SELECT … FOR UPDATE`` and success ``UPDATE`` went through
the query compiler again (issue #32: about a third of atomic mode's CPU per job). Their SQL
only depends on the model's table and columns and on the database, so it is built once here,
from ``connection.ops.quote_name()`` and the fields' own ``column`` (public API), and each job
sends a parameter tuple through ``connection.cursor().execute()``. The statements still pass
Django's cursor: execute wrappers, Sentry, debug-toolbar and ``assertNumQueries`` see them.

Every value is a parameter, converted by the field as the ORM would (``get_db_prep_value``);
only identifiers are in the text.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any, cast

from django.db import connections, models

from ..backends.columns import quoted_column
from ..states import QueueState
from .lease import CLAIM_TIMES, Claim

if TYPE_CHECKING:
    from .row import QueueRow


#: Where a statement's key placeholders go (their number varies per call): replaced by one
#: ``%s`` per key (the claim's row loader builds its SELECT on the same fence).
KEYS = "<keys>"


class Statements:
    """One model's fenced statements on one database."""

    def __init__(self, model: type[QueueRow], using: str) -> None:
        connection = connections[using]
        quote = connection.ops.quote_name
        self.using = using
        self.pk_field = model._meta.pk

        def column(name: str) -> str:
            return quoted_column(connection, model, name)

        self._finished = cast(models.Field, model._meta.get_field("queue_finished_at"))
        table, pk, token = (
            quote(model._meta.db_table),
            quote(cast(str, self.pk_field.column)),
            column("queue_token"),
        )
        # The keys' placeholders are put in per call (their number varies); the rest is fixed.
        #: The fence: the rows of the keys (:data:`KEYS`) that carry the claim's token.
        self.where = f"WHERE {pk} IN ({KEYS}) AND {token} = %s"
        # SQLite has no row locks: its transaction holds the database's one write lock.
        lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
        self._lock = f"SELECT {pk} FROM {table} {self.where}{lock}"
        self._succeed = (
            f"UPDATE {table} SET {column('queue_state')} = %s, {token} = %s, "
            f"{column('queue_finished_at')} = %s, {column('queue_locked_until')} = NULL, "
            f"{column('queue_last_error')} = %s {self.where}"
        )
        #: The claim's UPDATE: the parameters' fields (the state, the token, the worker, the
        #: claim's times), then the keys; ``queue_attempts`` counted up by the database.
        self._taking = [
            cast(models.Field, model._meta.get_field(name))
            for name in ("queue_state", "queue_token", "queue_locked_by", *CLAIM_TIMES)
        ]
        attempts = column("queue_attempts")
        assigned = ", ".join(f"{quote(cast(str, field.column))} = %s" for field in self._taking)
        self._take = f"UPDATE {table} SET {assigned}, {attempts} = {attempts} + 1 WHERE {pk} IN ({KEYS})"
        #: SQLite (no row locks): the claim's UPDATE is a compare-and-set on the state.
        self._take_ready = f"{self._take} AND {column('queue_state')} = %s"

    def _keys(self, ids: Sequence[Any], connection: Any = None) -> tuple[str, list[Any]]:
        # The caller's connection when it has it: each ``connections[alias]`` is a look-up in
        # a thread-local (asgiref's Local), paid per job.
        connection = connection or connections[self.using]
        prep = self.pk_field.get_db_prep_value
        return ", ".join(["%s"] * len(ids)), [prep(pk, connection) for pk in ids]

    def lock_held(self, ids: Sequence[Any], claim: Claim) -> set[Any]:
        """``SELECT pk … FOR UPDATE`` of the rows of ``ids`` that ``claim`` still holds."""
        marks, keys = self._keys(ids)
        with connections[self.using].cursor() as cursor:
            cursor.execute(self._lock.replace(KEYS, marks), [*keys, claim.token])
            found = [row[0] for row in cursor.fetchall()]
        # The database's spelling of a key (a UUID's hex on MySQL) back to the instances'.
        by_db = dict(zip(keys, ids, strict=True))
        return {by_db.get(pk, pk) for pk in found}

    def take(self, ids: Sequence[Any], claim: Claim, ready_only: bool = False) -> int:
        """The claim's UPDATE of the rows of ``ids`` (locked by its transaction): RUNNING under
        ``claim``'s token and worker, at its times, one more attempt. ``ready_only``: only
        those still READY (a database without row locks). Returns how many it took."""
        connection = connections[self.using]
        marks, keys = self._keys(ids, connection)
        values = (str(QueueState.RUNNING), claim.token, claim.worker_id, *claim.times().values())
        params = [
            field.get_db_prep_save(value, connection)
            for field, value in zip(self._taking, values, strict=True)
        ]
        params += keys
        sql = (self._take_ready if ready_only else self._take).replace(KEYS, marks)
        if ready_only:
            params.append(str(QueueState.READY))
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.rowcount

    def succeed(self, ids: Sequence[Any], claim: Claim, finished_at: datetime) -> int:
        """Mark the rows of ``ids`` still held by ``claim`` SUCCEEDED; return how many."""
        connection = connections[self.using]
        marks, keys = self._keys(ids, connection)
        when = self._finished.get_db_prep_value(finished_at, connection)
        with connection.cursor() as cursor:
            cursor.execute(
                self._succeed.replace(KEYS, marks),
                [str(QueueState.SUCCEEDED), -claim.token, when, "", *keys, claim.token],
            )
            return cursor.rowcount


@lru_cache(maxsize=256)
def statements(model: type[QueueRow], using: str) -> Statements:
    """The statements of ``model`` on the database ``using``, built on first use."""
    return Statements(model, using)


__all__ = ["Statements", "statements"]
