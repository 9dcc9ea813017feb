"""Round robin among keys at the same fair rank: claims start after the key served last.

The fair rank shares the rows in flight (:mod:`.ranking`); when nothing of several keys is in
flight (short jobs finish between two claims), their rows tie at the same rank, and a fixed
tie-break (the oldest head first, or the smallest key) would serve the same keys claim after
claim. So ties go to the keys after the one the model's last claim served last, wrapping
around: over a few claims every key with work gets its turn, however many rows the others
have, whichever host claims.

Where the turn stands is one ``QueueFairTurn`` row per model. A claim locks it
(:func:`take`) before it ranks and moves it (:func:`served`) before it commits, so the claims
of a model follow each other around the keys in one order, each starting where the last one
stopped (see :func:`take` for why a read without the lock is not enough).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from django.db import connections, models
from django.db.models import Case, F, Q, Value, When

from ..backends import backend_for, quoted_column
from ..tables.fairness import QueueFairTurn

#: Whether the model has a turn, and the key its last claim served last.
Turn = tuple[bool, Any]
NO_TURN: Turn = (False, None)


def _turns(model: type[models.Model], using: str) -> models.QuerySet:
    return QueueFairTurn._default_manager.using(using).filter(model=model._meta.label)


def _as_turn(model: type[models.Model], key: str, text: str | None) -> Turn:
    if not text:
        return NO_TURN
    try:
        return True, model._meta.get_field(key).to_python(text)  # type: ignore[union-attr]
    except Exception:  # noqa: BLE001 - a turn that does not read back starts from the first key
        return NO_TURN


def last_served(model: type[models.Model], using: str, key: str) -> Turn:
    """The turn, read without a lock (one small read): for a look at the order outside a
    claim (tests, EXPLAIN); a claim takes it with :func:`take`."""
    return _as_turn(model, key, _turns(model, using).values_list("last_key", flat=True).first())


@lru_cache(maxsize=16)
def _names(using: str) -> tuple[str, str, str]:
    """The turn's table, and its ``model`` and ``last_key`` columns, quoted for ``using``."""
    connection = connections[using]
    table = connection.ops.quote_name(QueueFairTurn._meta.db_table)
    model, last_key = (quoted_column(connection, QueueFairTurn, name) for name in ("model", "last_key"))
    return table, model, last_key


@lru_cache(maxsize=16)
def _statements(using: str) -> tuple[str, str]:
    """The turn's locking read and its move on database ``using``, built once (they are
    sent on every fair claim): identifiers quoted by the connection, values parameters."""
    table, model, last_key = _names(using)
    # SQLite has no row locks: its claim's transaction holds the database's one write lock.
    lock = " FOR UPDATE" if connections[using].features.has_select_for_update else ""
    return (
        f"SELECT {last_key} FROM {table} WHERE {model} = %s{lock}",
        f"UPDATE {table} SET {last_key} = %s WHERE {model} = %s",
    )


def take(model: type[models.Model], using: str, key: str) -> Turn:
    """Lock the model's turn until the claim's transaction ends, and read it (one small
    locking read; the model's first claim creates the row first).

    Why the lock, and before the ranking: the turn is one position shared by every claimer.
    Read without a lock, claimers in flight at once rank from the same position, or from one
    already stale when they lock their rows; the one that moves the turn last moves it back
    over keys the others just served, and the next claims serve those keys again while the
    keys beyond wait (seen with 4 ``runqueue`` workers on a loaded machine: a quiet tenant
    first claimed in the 10th claim, not within the 8 of two claim cycles). Held from before
    the ranking to the commit, the claims of a model take the turn one after the other, each
    ranking what the one before left (its rows RUNNING, the turn moved past them). They wait
    for each other that long (a claim's short transaction, no user code), never for queue
    rows, which they still lock with ``SKIP LOCKED``."""
    read = _statements(using)[0]
    with connections[using].cursor() as cursor:
        cursor.execute(read, [model._meta.label])
        found = cursor.fetchone()
        if found is None:
            QueueFairTurn._default_manager.using(using).bulk_create(
                [QueueFairTurn(model=model._meta.label, last_key="")], ignore_conflicts=True
            )
            cursor.execute(read, [model._meta.label])
            found = cursor.fetchone()
    return _as_turn(model, key, found[0] if found else None)


def rotation_order(model: type[models.Model], using: str, key: str, turn: Turn | None = None) -> list[Any]:
    """Order expressions: keys after the last one served first, then the rest, by key
    (``turn``: as :func:`take` found it; None reads it without a lock)."""
    by_key = F(key).asc()
    served, last = last_served(model, using, key) if turn is None else turn
    if not served:
        return [by_key]
    after = Case(When(Q(**{f"{key}__gt": last}), then=Value(0)), default=Value(1))
    return [after.asc(), by_key]


#: Key fields whose turn the walk's statement can read as the key's type (PostgreSQL): text
#: compares as stored, and an integer's text is checked before its cast.
_TEXT_KEYS = frozenset({"CharField", "TextField", "SlugField", "EmailField"})
_INTEGER_KEYS = frozenset(
    {
        "IntegerField",
        "BigIntegerField",
        "SmallIntegerField",
        "PositiveIntegerField",
        "PositiveBigIntegerField",
        "PositiveSmallIntegerField",
        "AutoField",
        "BigAutoField",
        "SmallAutoField",
    }
)


def _key_type(model: type[models.Model], key: str) -> str | None:
    field: Any = model._meta.get_field(key)
    target = field.target_field if field.is_relation else field
    kind = target.get_internal_type()
    return "text" if kind in _TEXT_KEYS else "integer" if kind in _INTEGER_KEYS else None


def locking_ctes(model: type[models.Model], using: str, key: str) -> tuple[str, tuple[Any, ...]] | None:
    """The turn's lock as CTEs of the walk's statement (one statement less per claim), or
    None where the backend or the key's type needs :func:`take`'s own statement."""
    table, label, last_key = _names(using)
    return backend_for(using).fair_turn_ctes(table, label, last_key, model._meta.label, _key_type(model, key))


def move_to_last_locked(model: type[models.Model], using: str, key: str) -> tuple[str, tuple[Any, ...]]:
    """The turn's move to the key of ``dbqueue_last``, the last row a walk's statement locked
    (:class:`~django_dbqueue.backends.base.HeadsLockSql`, PostgreSQL): the key as
    :func:`turn_text` stores it, for the key types :func:`locking_ctes` reads back."""
    table, label, last_key = _names(using)
    column = "dbqueue_last.dbqueue_key"
    text = f"CAST({column} AS text)" if _key_type(model, key) == "integer" else f"LEFT({column}, 255)"
    update = f"UPDATE {table} SET {last_key} = (SELECT {text} FROM dbqueue_last) WHERE {label} = %s"
    return update, (model._meta.label,)


def turn_text(last: Any) -> str:
    """Key ``last`` as the turn's row stores it."""
    return str(last)[:255]


def move(model: type[models.Model], using: str, last: Any) -> tuple[str, tuple[Any, ...]] | None:
    """:func:`served`'s UPDATE as a statement to send with another (the rows' lock, which a
    claim holding the turn sends anyway); None for a None key, which moves nothing. The
    turn's row exists: the claim holds its lock."""
    if last is None:
        return None
    return move_to(model, using, turn_text(last))


def move_to(model: type[models.Model], using: str, text: Any) -> tuple[str, tuple[Any, ...]]:
    """:func:`move`'s statement to the stored key ``text`` (or a marker a cached statement
    fills with it)."""
    return _statements(using)[1], (text, model._meta.label)


def served(model: type[models.Model], using: str, last: Any) -> None:
    """Move the turn past ``last``, the last key a claim took (a None key moves nothing)."""
    if last is None:
        return
    text = turn_text(last)
    with connections[using].cursor() as cursor:
        cursor.execute(_statements(using)[1], [text, model._meta.label])
        moved = cursor.rowcount
    if not moved:
        QueueFairTurn._default_manager.using(using).bulk_create(
            [QueueFairTurn(model=model._meta.label, last_key=text)], ignore_conflicts=True
        )
