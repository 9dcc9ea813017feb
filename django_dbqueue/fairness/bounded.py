"""The fair order from a bounded read: its cost grows with the keys a claim serves, not with
the backlog of due rows.

The order is the one :mod:`.ranking` defines (a key's n-th due row ranks ``(n + held) /
weight``; rows go by rank, then the round robin among keys), but only the rows that can be
among the first ``window`` are read:

* Keys are walked in the round robin's order (after the key served last, then from the
  first), each with its head row (:func:`.heads.walk`), until ``window`` keys with nothing
  running and a weight of at least 1 have a due head. Their heads all rank 1 or better, and
  every key not walked comes later in the round robin: its head (rank 1 at best) cannot pass
  them, so no row of an unwalked key is among the first ``window`` rows, unless its weight
  is above 1. Those keys (named by the weights, a few) are read as well, and so is the key
  NULL, which takes its turn after every key.
* When the walk runs out of keys first, every key with work has been seen; how many rows
  each can place is then computed from the ranks alone (``window`` ranks merged over the
  keys, ties at the last rank included), and only the keys that can place more than their
  head are read again, ``LIMIT n`` each (:func:`.heads.first_rows`). A key that has fewer
  rows than asked frees places for the others: the merge runs again with what is known.

Ranking these rows in Python as :mod:`.ranking` ranks every due row gives the same first
``window`` rows. Not covered (``pick`` ranks every due row for them instead): aging, whose
order within a key is not an index's, and weights read through the key's relation.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

from django.db import models

from . import heads, rotation
from .heads import Row, SqlParams
from .options import DEFAULT_WEIGHT, FairShare
from .weights import weight_table

#: Index entries a walk reads per key it asks for, at least (MySQL/MariaDB: see
#: ``fair_keys_sql``), and at most before it walks key by key (a loose index scan) instead.
BUDGET, MAX_BUDGET = 4, 64
#: Index entries per key the last budgeted walk of a model (by database) found, when it ran
#: out of its budget: the next walks ask for that many per key (half as many again). A hint
#: of this process only: any budget, or none, gives the same keys.
_ROWS_PER_KEY: dict[tuple[str, str], float] = {}
#: Whether the last walk of a model (by database) went past the first segment of the round
#: robin (the keys after the turn): then the next walks ask for both segments in one
#: statement (few keys: both are needed), else for the first (many keys: it is usually
#: enough). A hint too: either gives the same keys.
_BOTH_SEGMENTS: dict[tuple[str, str], bool] = {}
#: How many keys had rows in flight at the model's last claim (by database): the first walk,
#: which counts them in the same statement, asks for that many keys more than the window.
_HELD_KEYS: dict[tuple[str, str], int] = {}


def _budget(memory: tuple[str, str], step: int) -> int | None:
    per_key = max(BUDGET, 1.5 * _ROWS_PER_KEY.get(memory, 0))
    return None if per_key > MAX_BUDGET else int(per_key * step)


#: A loose scan that finds every key it asked for may be reading many small keys (slow, one
#: dive a key) or exactly as many big ones as asked (the right read): one in this many such
#: scans forgets the hint, so the next walk tries the budgeted read again (one cheap walk
#: more when the keys are big; back to the budgeted read when they became small).
PROBE_EVERY = 8
_FULL_LOOSE_SCANS: dict[tuple[str, str], int] = {}


def _remember(
    memory: tuple[str, str], budget: int | None, walked: int, step: int, stopped_early: bool
) -> None:
    if budget is not None and stopped_early:
        _ROWS_PER_KEY[memory] = budget / max(walked, 1)
    elif budget is None and walked >= step:
        scans = _FULL_LOOSE_SCANS[memory] = _FULL_LOOSE_SCANS.get(memory, 0) + 1
        if scans % PROBE_EVERY == 0:
            _ROWS_PER_KEY.pop(memory, None)
    elif memory in _ROWS_PER_KEY and budget is not None:
        # Keys thinning out: a little less next time, so a model whose keys became small
        # goes back to the cheaper budgeted read. A loose scan that ran out of keys before
        # ``step`` keeps the hint: it cost fewer than ``step`` dives, and a budgeted read of
        # those few big keys would stop early and cost a second walk (which, halving the hint
        # after each loose scan, happened every other claim at 100 keys of 140 rows).
        _ROWS_PER_KEY[memory] *= 0.9


@dataclass
class Key:
    """What the ranking knows of one key: its place in the round robin, its rows in flight,
    its weight, its first due rows read so far, and whether those are all it has."""

    position: int
    held: int
    weight: float
    rows: list[Row] = field(default_factory=list)
    complete: bool = False

    def rank(self, number: int) -> float:
        return (number + self.held) / self.weight

    @property
    def full_rank(self) -> bool:
        """Its head ranks 1 or better (nothing running, a weight of at least 1)."""
        return self.held == 0 and self.weight >= DEFAULT_WEIGHT


class TurnNotTaken(Exception):
    """The walk's statement did not lock the turn fresh (another claim holds it or moved it
    after the statement's snapshot, or the model's turn is not set yet): the caller takes it
    by :func:`.rotation.take` and asks again with it. The walk read nothing then."""


def bounded_order(
    qs: models.QuerySet,
    fair: FairShare,
    window: int,
    turn: rotation.Turn | None = None,
    turn_lock: SqlParams | None = None,
) -> list[tuple[Any, Any]]:
    """``(pk, key)`` of the first ``window`` due rows of ``qs`` in fair order (``turn``: the
    claim's, :func:`.rotation.take`; None reads it without a lock). ``turn_lock``
    (:func:`.rotation.locking_ctes`): the first walk locks the turn in its own statement
    instead, or raises :class:`TurnNotTaken` (:func:`locking_order` says what it found)."""
    assert fair.key is not None
    if turn_lock is not None:
        return locking_order(qs, fair, window, turn_lock)[0]
    segments = _segments(rotation.last_served(qs.model, qs.db, fair.key) if turn is None else turn)
    return _order(qs, fair, window, segments, None)


def locking_order(
    qs: models.QuerySet,
    fair: FairShare,
    window: int,
    turn_lock: SqlParams,
    lock: heads.HeadsLock | None = None,
) -> tuple[list[tuple[Any, Any]], rotation.Turn]:
    """:func:`bounded_order` whose first walk locks the turn (``turn_lock``:
    :func:`.rotation.locking_ctes`), and the turn it found; or :class:`TurnNotTaken`.
    ``lock``: the first walk also locks the heads the fair order begins with, when the model
    has no weights (:class:`.heads.HeadsLock`; left empty otherwise)."""
    segments = [heads.Segment("gt", heads.TURN_IN_STATEMENT), heads.Segment("lte", heads.TURN_IN_STATEMENT)]
    order = _order(qs, fair, window, segments, turn_lock, lock)
    return order, (True, segments[0].bound)


def _order(
    qs: models.QuerySet,
    fair: FairShare,
    window: int,
    segments: list[heads.Segment],
    turn_lock: SqlParams | None,
    lock: heads.HeadsLock | None = None,
) -> list[tuple[Any, Any]]:
    assert fair.key is not None
    weights = weight_table(qs.model, fair)
    walker = heads.Walker(qs, fair.key, heads.filters_of(qs))
    # Heads rank first only while every weight is 1: a heavier key's later rows may pass
    # them, a lighter key's head ranks after others' second rows.
    lock = lock if turn_lock is not None and not weights else None
    keys, held, walked_all = _walk(walker, window, weights, segments, turn_lock, lock)
    _add_unwalked(keys, held, weights, walked_all)
    _read_places(qs, fair.key, keys, window)
    ranked = [
        (key.rank(number), key.position, number, row)
        for key in keys.values()
        for number, row in enumerate(key.rows, start=1)
    ]
    ranked.sort(key=lambda entry: entry[:3])
    return [(row[0], row[1]) for *_, row in ranked[:window]]


def _segments(turn: rotation.Turn) -> list[heads.Segment]:
    """The round robin's order as key ranges: after the key served last, then the rest."""
    served, last = turn
    if not served:
        return [heads.Segment(None)]
    return [heads.Segment("gt", last), heads.Segment("lte", last)]


def _turn_taken(segments: list[heads.Segment], taken: tuple[Any, bool] | None) -> None:
    """The segments' bound, the turn's key as the walk's statement locked it."""
    if taken is None or not taken[1] or taken[0] is None:
        raise TurnNotTaken
    for segment in segments:
        segment.bound = taken[0]


def _walk(
    walker: heads.Walker,
    window: int,
    weights: dict[Any, float],
    segments: list[heads.Segment],
    turn_lock: SqlParams | None,
    lock: heads.HeadsLock | None,
) -> tuple[dict[Any, Key], dict[Any, int], bool]:
    """Keys with a due head in round-robin order, until ``window`` of them rank 1 or better;
    the keys' RUNNING rows (counted by the first walk); and whether every key with READY
    rows was walked. One statement in the usual case: the RUNNING rows, and the segments the
    model's last walk needed, each as far as ``step`` keys."""
    keys: dict[Any, Key] = {}
    held: dict[Any, int] | None = None
    memory = (walker.qs.db, walker.qs.model._meta.label)
    # Keys with rows in flight take places in the walk without filling it: as many as the
    # last claim found (the walk goes on if there are more now).
    step = window + _HELD_KEYS.get(memory, 0)
    both = _BOTH_SEGMENTS.get(memory, False)
    while True:
        open_segments = [segment for segment in segments if not segment.done]
        if not open_segments:
            _BOTH_SEGMENTS[memory] = len(segments) > 1
            return keys, held or {}, True
        asked = open_segments if both else open_segments[:1]
        budget = _budget(memory, step)
        results, counted, taken = walker.walk(asked, step, budget, held is None, turn_lock, lock)
        if turn_lock is not None:
            _turn_taken(segments, taken)
            turn_lock, lock = None, None
        if held is None:
            held = counted
            _HELD_KEYS[memory] = len(held)
        for segment, (walked, stopped_early) in zip(asked, results, strict=True):
            _remember(memory, budget, len(walked), step, stopped_early)
            if _take_keys(keys, walked, held, weights, window):
                _BOTH_SEGMENTS[memory] = segment is not segments[0]
                return keys, held, False
            segment.done = len(walked) < step and not stopped_early
            if not segment.done:  # keys of more rows than budgeted, or more keys: walk on from here
                segment.after = walked[-1][0] if walked else segment.after
                break  # the later segments come after it in the round robin: walked once it is done


def _take_keys(
    keys: dict[Any, Key],
    walked: list[tuple[Any, Row | None]],
    held: dict[Any, int],
    weights: dict[Any, float],
    window: int,
) -> bool:
    """Add the walked keys with a head to ``keys``; whether ``window`` of them rank 1 or better."""
    full = sum(key.full_rank for key in keys.values())
    for value, head in walked:
        if head is None or value in keys:
            continue
        found = Key(len(keys), held.get(value, 0), weights.get(value, DEFAULT_WEIGHT), [head])
        keys[value] = found
        full += found.full_rank
        if full >= window:
            return True
    return False


def _add_unwalked(
    keys: dict[Any, Key], held: dict[Any, int], weights: dict[Any, float], walked_all: bool
) -> None:
    """The keys the walk did not reach that may still place rows: weights above 1 (their
    heads rank better than 1), and the key NULL when every other key was walked."""
    extra = [value for value, weight in weights.items() if weight > DEFAULT_WEIGHT and value not in keys]
    if walked_all and None not in extra:
        extra.append(None)
    for value in extra:
        keys[value] = Key(len(keys), held.get(value, 0), weights.get(value, DEFAULT_WEIGHT))


def places(keys: dict[Any, Key], window: int) -> dict[Any, int]:
    """How many rows each key places among the first ``window`` by rank alone (its rows
    unread assumed to exist unless it is complete), ties at the last rank included."""
    heap = [(key.rank(1), key.position, value, 1) for value, key in keys.items() if _has(key, 1)]
    heapq.heapify(heap)
    placed: dict[Any, int] = {}
    taken, last = 0, None
    while heap and (taken < window or heap[0][0] == last):
        rank, position, value, number = heapq.heappop(heap)
        placed[value], last, taken = number, rank, taken + 1
        if _has(keys[value], number + 1):
            heapq.heappush(heap, (keys[value].rank(number + 1), position, value, number + 1))
    return placed


def _has(key: Key, number: int) -> bool:
    return not key.complete or number <= len(key.rows)


def _read_places(qs: models.QuerySet, key: str, keys: dict[Any, Key], window: int) -> None:
    """Read the rows each key places, again while a key turns out to have fewer."""
    while True:
        wanted = {value: n for value, n in places(keys, window).items() if n > len(keys[value].rows)}
        wanted = {value: n for value, n in wanted.items() if not keys[value].complete}
        if not wanted:
            return
        for value, rows in heads.first_rows(qs, key, wanted).items():
            keys[value].rows = rows
            keys[value].complete = len(rows) < wanted[value]
