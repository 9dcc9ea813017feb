"""The claim's locking SELECTs for a model with fair share or aging.

The claim (``queue.queryset``) asks :func:`locked_candidates` for its locked rows. A model
with neither option gets the plain claim's one SELECT. Otherwise, inside the claim's
transaction:

* aging alone: due rows waiting longer than the bound first, oldest first (index-driven with
  an index on ``(queue_state, queue_run_at)``, which a system check asks for: one locking
  SELECT, on MySQL and MariaDB a read without locks and the rows it found locked by primary
  key), then the plain claim fills what is left;
* fair share: first the round robin's turn, locked until the commit (:func:`.rotation.take`:
  the claims of a model rank one after the other, each from where the last one stopped);
  then the fair order (without row locks: the keys' running rows, a small read, then the
  rows that can be offered, :mod:`.bounded`; or, on SQLite, with aging or with weights
  through the key's relation, one SELECT ranking every due row, :mod:`.ranking`), then the
  chosen rows locked by primary key with ``SKIP LOCKED``, a batch's worth at a time, until
  the batch is full or the candidates run out. Each statement locks only rows it takes, so
  a row some other transaction holds (an operator's bulk action, a claim through per-key
  limits' gate) is passed by instead of waited for, and a row that stopped being READY
  meanwhile is dropped by the re-checked WHERE. Last, one UPDATE moves the turn past the
  last key taken (:mod:`.rotation`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import connections, models
from django.db.models.expressions import RawSQL

from ..backends import DbNow, backend_for, compiled, db_now_plus
from ..conf import settings
from . import heads, rotation
from .bounded import TurnNotTaken, bounded_order, locking_order
from .options import FairShare, fair_share_of
from .ranking import fair_order

Candidate = tuple[Any, ...]  # (pk, token, database now, *also): what the claim locks


def locked_candidates(qs: Any, limit: int, also: tuple[str, ...] = ()) -> list[Candidate]:
    """Up to ``limit`` due rows of ``qs``, locked, in the model's claim order."""
    fair = fair_share_of(qs.model)
    if fair is None:
        return list(qs.claim_candidates(limit, *also))
    if fair.key is None:
        return _aged_first(qs, fair, limit, also)
    return _fair(qs, fair, limit, also)


def _locking(rows: models.QuerySet, also: tuple[str, ...]) -> models.QuerySet:
    locking = rows.select_for_update(skip_locked=True).annotate(dbqueue_now=DbNow())
    return locking.values_list("pk", "queue_token", "dbqueue_now", *also)


def _aged_first(qs: Any, fair: FairShare, limit: int, also: tuple[str, ...]) -> list[Candidate]:
    assert fair.aging is not None
    bound = fair.aging
    backend = backend_for(qs.db)
    if backend.reads_aged_rows_unlocked:
        return _aged_found_first(qs, bound, limit, also)
    aged = _aged(qs, bound)
    if backend.locking_union and not also:
        # One statement (PostgreSQL): the aged rows, then the plain claim's of the rows not
        # aged (it locks only as many as the aged ones left room for). As two statements the
        # second's round trip made an aging claim 16 % slower than the plain claim.
        def build() -> tuple[str, tuple[Any, ...]]:
            fresh = qs.filter(queue_run_at__gt=db_now_plus(-bound)).claim_candidates(limit)
            return backend.locking_statement([compiled(_locking(aged, ())[:limit]), compiled(fresh)], limit)

        # Built once per model, database, claim filters and batch size: compiling its two
        # SELECTs on every claim cost more CPU than the plain claim's one.
        statement = heads.cached(heads.filters_of(qs), ("aging", bound, limit), build)
        return statement.fetch(qs.db, {})
    taken = list(_locking(aged, also)[:limit])
    return _then_plain(qs, taken, limit, also)


def _aged(qs: Any, bound: timedelta) -> models.QuerySet:
    """The due rows of ``qs`` waiting longer than ``bound``, oldest first."""
    return qs.ready().filter(queue_run_at__lte=db_now_plus(-bound)).order_by("queue_run_at", "pk")


def _aged_found_first(qs: Any, bound: timedelta, limit: int, also: tuple[str, ...]) -> list[Candidate]:
    """The aged rows found by a read without locks, then locked by primary key a batch's
    worth at a time (:func:`_lock_in_order`, ``SKIP LOCKED``, the due rows re-checked), then
    the plain claim for what is left (the backend's ``reads_aged_rows_unlocked`` says why).

    With no aged row (the usual case) that is one read more than the plain claim, and the
    plain claim's own locking SELECT. The read offers ``FAIR_CANDIDATES`` rows per row
    wanted, as the fair claim's does, so concurrent claimers that found the same aged rows
    still fill their batches from the later ones; a row a claimer found aged and another
    took meanwhile is passed by."""
    window = limit * settings.FAIR_CANDIDATES
    # Built once per model, database, claim filters, bound and window, as the union is on
    # PostgreSQL: compiling it on every claim cost about 1 ms of CPU (MariaDB, claim(100)).
    probe = heads.cached(
        heads.filters_of(qs),
        ("aged", bound, window),
        lambda: compiled(_aged(qs, bound).values_list("pk")[:window]),
    )
    found = [row[0] for row in probe.fetch(qs.db, {})]
    taken: list[Candidate] = []
    if found:
        _lock_in_order(qs, [(pk, None) for pk in found], limit, also, taken, None, {})
    return _then_plain(qs, taken, limit, also)


def _then_plain(qs: Any, taken: list[Candidate], limit: int, also: tuple[str, ...]) -> list[Candidate]:
    """``taken`` (the aged rows locked), filled up to ``limit`` by the plain claim's order."""
    if len(taken) < limit:
        rest = qs.exclude(pk__in=[row[0] for row in taken]) if taken else qs
        taken.extend(rest.claim_candidates(limit - len(taken), *also))
    return taken


def _run(using: str, statement: tuple[str, tuple[Any, ...]]) -> list[Candidate]:
    """Candidates of a locking statement sent as SQL (``(pk, token, database now)``: types
    the driver returns as they are, no converters needed)."""
    with connections[using].cursor() as cursor:
        cursor.execute(*statement)
        return [tuple(row) for row in cursor.fetchall()]


def _bounded(qs: Any, fair: FairShare) -> bool:
    """Whether the fair order comes from the bounded read (:mod:`.bounded`): not for aging
    nor weights through the key's relation, nor on SQLite (one window SELECT there)."""
    return fair.aging is None and not isinstance(fair.weights, str) and backend_for(qs.db).bounded_fair


def _windows(bounded: bool, limit: int) -> list[int]:
    """How many rows of the fair order each pass offers: the bounded read first offers one
    per row wanted (all a lone claimer needs), then the full window if concurrent claimers
    took some; the ranking of every due row offers the full window at once."""
    full = limit * settings.FAIR_CANDIDATES
    return [limit, full] if bounded and full > limit else [full]


def _first_order(
    qs: Any, fair: FairShare, window: int, bounded: bool, lock: heads.HeadsLock | None
) -> tuple[list[tuple[Any, Any]], rotation.Turn]:
    """The first pass's fair order and the claim's turn, locked: by the walk's own
    statement where the backend can (PostgreSQL; one statement less, and with ``lock`` the
    heads it found locked too), else first by :func:`.rotation.take`."""
    assert fair.key is not None
    turn_lock = rotation.locking_ctes(qs.model, qs.db, fair.key) if bounded else None
    if turn_lock is not None:
        try:
            return locking_order(qs, fair, window, turn_lock, lock)
        except TurnNotTaken:
            pass  # another claim holds the turn or just moved it: wait for it, walk again
    turn = rotation.take(qs.model, qs.db, fair.key)
    return _order_of(qs, fair, window, bounded, turn), turn


def _order_of(
    qs: Any, fair: FairShare, window: int, bounded: bool, turn: rotation.Turn
) -> list[tuple[Any, Any]]:
    return bounded_order(qs, fair, window, turn) if bounded else fair_order(qs, fair, window, turn)


def _fair(qs: Any, fair: FairShare, limit: int, also: tuple[str, ...]) -> list[Candidate]:
    taken: list[Candidate] = []
    key_of: dict[Any, Any] = {}
    bounded = _bounded(qs, fair)
    assert fair.key is not None
    moving = not also and backend_for(qs.db).locking_ctes
    # The walk's statement locks the heads the order begins with, where it can (they are
    # all a claim of many keys takes: no statement of its own for the rows then).
    lock = heads.HeadsLock(limit) if moving and bounded else None
    # The first pass locks the turn; the later ones rank from the turn it found (the first
    # pass's locking statement may have moved it already).
    turn = rotation.NO_TURN
    moved: list[Any] = []
    for number, window in enumerate(_windows(bounded, limit)):
        if number == 0:
            order, turn = _first_order(qs, fair, window, bounded, lock)
        else:
            order = _order_of(qs, fair, window, bounded, turn)
        fresh = [(pk, key) for pk, key in order if pk not in key_of]
        key_of.update(order)
        pre = lock.locked if lock is not None and number == 0 else {}
        if pre and lock is not None and lock.moved_to is not None:
            moved.append(lock.moved_to)
        # The first statement that locks rows moves the turn past the last of them: the
        # first pass's (after the walk's own move, when it locked heads), else the first.
        may_move = moving and (number == 0 or not moved)
        _lock_in_order(qs, fresh, limit, also, taken, moved if may_move else None, pre)
        if len(taken) >= limit:
            break
    if taken and (not moved or key_of[taken[-1][0]] != moved[-1]):
        rotation.served(qs.model, qs.db, key_of[taken[-1][0]])
    return taken


def _lock_in_order(
    qs: Any,
    order: list[tuple[Any, Any]],
    limit: int,
    also: tuple[str, ...],
    taken: list[Candidate],
    moved: list[Any] | None,
    pre: dict[Any, Candidate],
) -> None:
    """Lock rows of ``order`` by primary key, a batch's worth at a time, into ``taken``;
    ``pre``: rows the walk's statement locked already (no statement for them).

    ``moved`` (where the backend can and the claim holds the turn): the first statement
    also moves the turn past the key of its last row, the one :func:`_fair` would move it
    to when every row of it is locked (a lone claimer's case), and ``moved`` ends with that
    key; :func:`_fair` moves the turn again only when the last row taken differs. A claim
    whose every row was taken by others meanwhile may leave the turn past them."""
    start = 0
    while len(taken) < limit and start < len(order):
        pairs = order[start : start + limit - len(taken)]
        start += len(pairs)
        need = [pk for pk, _ in pairs if pk not in pre]
        move_past = pairs[-1][1] if moved is not None and need else None
        if move_past is not None:
            assert moved is not None
            moved.append(move_past)
            moved = None  # one move per call: the first statement's
        locked = {row[0]: row for row in _lock_rows(qs, need, also, move_past)} if need else {}
        taken.extend(locked.get(pk) or pre[pk] for pk, _ in pairs if pk in locked or pk in pre)


def _lock_rows(qs: Any, chunk: list[Any], also: tuple[str, ...], move_past: Any) -> list[Candidate]:
    """The rows of ``chunk`` still due, locked (``SKIP LOCKED``); and, when ``move_past`` is
    not None, the turn moved past that key in the same statement (:attr:`locking_ctes`)."""
    if _built_once(qs, also, move_past):
        return _built_lock(qs, chunk, move_past)
    backend = backend_for(qs.db)
    chosen = _locking(backend.with_pks(qs.ready(), chunk).order_by(), also)
    write = rotation.move(qs.model, qs.db, move_past)
    if write is None:
        return list(chosen)
    return _run(qs.db, backend.locking_statement([compiled(chosen)], None, [write]))


def _built_once(qs: Any, also: tuple[str, ...], move_past: Any) -> bool:
    """Whether :func:`_built_lock` serves: no extra columns, and either the keys bind as one
    array (PostgreSQL) or, one parameter per key, with row locks (not SQLite, whose driver
    hands the database's now back as text), an integer primary key (the driver's value is
    the key) and no move of the turn (MySQL, MariaDB)."""
    if also:
        return False
    if backend_for(qs.db).binds_arrays:
        return True
    return (
        move_past is None
        and connections[qs.db].features.has_select_for_update
        and isinstance(qs.model._meta.pk, models.IntegerField)
    )


def _built_lock(qs: Any, chunk: list[Any], move_past: Any) -> list[Candidate]:
    """:func:`_lock_rows`' statement built once per model, database and claim filters (and,
    one parameter per key, number of keys), run with the keys as parameters: compiling the
    QuerySet on every claim cost a fair claim of 100 rows about 1 ms of CPU (PostgreSQL),
    0.7 ms (MariaDB)."""
    prep, connection = qs.model._meta.pk.get_db_prep_value, connections[qs.db]
    keys = [prep(pk, connection) for pk in chunk]
    if backend_for(qs.db).binds_arrays:
        shape: tuple[Any, ...] = ("lock", "array", move_past is not None)
        values: dict[Any, Any] = {"pks": keys, "turn": rotation.turn_text(move_past)}
    else:
        shape, values = ("lock", "listed", len(keys)), {("pk", n): key for n, key in enumerate(keys)}
    statement = heads.cached(heads.filters_of(qs), shape, lambda: _lock_statement(qs, len(keys), move_past))
    return statement.fetch(qs.db, values)


def _lock_statement(qs: Any, count: int, move_past: Any) -> tuple[str, tuple[Any, ...]]:
    """:func:`_built_lock`'s statement with markers: the keys (``pks``, one array; or
    ``("pk", n)``, ``count`` of them), and ``turn`` if it moves the turn."""
    backend = backend_for(qs.db)
    if backend.binds_arrays:
        rows = backend.with_array(qs.ready(), "pk", heads.Marker("pks"))
    else:
        rows = qs.ready().filter(pk__in=[RawSQL("%s", (heads.Marker(("pk", n)),)) for n in range(count)])
    chosen = compiled(_locking(rows.order_by(), ()))
    if move_past is None:
        return chosen
    move = rotation.move_to(qs.model, qs.db, heads.Marker("turn"))
    return backend.locking_statement([chosen], None, [move])
