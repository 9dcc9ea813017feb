"""Dependencies: a job that runs only after its parents succeeded (docs/composition.md).

``row.enqueue(after=[a, b], on_parent_failure="cancel")`` stores the job IDLE (not claimable)
with a ``JobWait`` counting its unfinished parents and one ``JobDependency`` edge per parent,
and marks each parent ``queue_dependants``. The outcome of the last parent makes it READY in
the same transaction (:func:`django_dbqueue.composition.hooks.finished`): no scan ever looks for
dependants to promote.

The parents are locked while the edges are written, so a parent cannot be claimed in between
with a stale ``queue_dependants`` loaded: a parent already RUNNING is refused for that reason
(its worker loaded the row before it had dependants). Everything is checked before anything
is written: a parent that does not exist, a cycle, a bad policy raise
:class:`~django_dbqueue.exceptions.InvalidDependency` and write nothing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.db import models, router, transaction

from ..backends import DbNow
from ..exceptions import DependencyCycle, InvalidDependency
from ..states import QueueState
from ..tables.composition import JobDependency, JobWait
from . import hooks as composition

if TYPE_CHECKING:
    from ..queue.row import QueueRow

POLICIES = ("cancel", "run")
#: A parent in one of these states can no longer succeed.
_ENDED_BADLY = (QueueState.FAILED, QueueState.CANCELLED)

Key = tuple[str, str]


def key_of(row: models.Model) -> Key:
    return (row._meta.label_lower, str(row.pk))


def enqueue_after(row: QueueRow, parents: Iterable[Any], on_parent_failure: str = "cancel") -> bool:
    """Store ``row`` (new, or existing and not running) to run after ``parents`` succeed.

    Returns True if the row is READY at once (every parent had succeeded already)."""
    if on_parent_failure not in POLICIES:
        raise InvalidDependency(f"on_parent_failure must be one of {POLICIES}, not {on_parent_failure!r}")
    parents = list(parents)
    if not parents:
        raise InvalidDependency("after= needs at least one parent job")
    for parent in parents:
        if not isinstance(parent, models.Model) or not hasattr(parent, "queue_state"):
            raise InvalidDependency(f"a parent must be a queue row (a QueueMixin instance), not {parent!r}")
        if parent.pk is None:
            raise InvalidDependency(f"parent {parent!r} is not saved: enqueue it first")
    using = row._state.db or router.db_for_write(type(row))
    with transaction.atomic(using=using):
        states = _lock_parents(using, parents)
        if not row._state.adding:
            _refuse_cycle(using, key_of(row), set(states))
        pending = [
            parent for parent, state in states.items() if state not in (*_ENDED_BADLY, QueueState.SUCCEEDED)
        ]
        doomed = on_parent_failure == "cancel" and any(state in _ENDED_BADLY for state in states.values())
        _store_idle(row, using)
        wait = _waits(using).create(
            model=row._meta.label_lower,
            object_pk=str(row.pk),
            pending=len(pending),
            on_parent_failure=on_parent_failure,
            created_at=DbNow(),
        )
        edges = JobDependency
        edges._base_manager.using(using).bulk_create(
            edges(wait=wait, parent_model=label, parent_pk=pk, settled=(label, pk) not in pending)
            for label, pk in states
        )
        for label, pks in _by_model(pending).items():
            _rows(label, using).filter(pk__in=pks).update(queue_dependants=True)
        if doomed:
            composition.cancel_dependants(using, wait.model, [wait.object_pk], "a parent had failed already")
        elif not pending:
            composition.promote(using, wait.model, [wait.object_pk])
            _waits(using).filter(pk=wait.pk).update(promoted_at=wait.created_at)
    row.refresh_from_db(using=using, fields=["queue_state", "queue_batch", "queue_dependants"])
    return row.queue_state == QueueState.READY


def _waits(using: str) -> models.QuerySet:
    return JobWait._base_manager.using(using)


def _rows(label: str, using: str) -> models.QuerySet:
    return apps.get_model(label)._base_manager.using(using)


def _by_model(keys: Iterable[Key]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = defaultdict(list)
    for label, pk in keys:
        grouped[label].append(pk)
    return grouped


def _lock_parents(using: str, parents: Sequence[models.Model]) -> dict[Key, str]:
    """The parents' states, their rows locked (in one order: no deadlock between two callers)."""
    states: dict[Key, str] = {}
    for label, pks in sorted(_by_model(key_of(p) for p in parents).items()):
        model = apps.get_model(label)
        found = dict(
            model._base_manager.using(using)
            .filter(pk__in=pks)
            .order_by("pk")
            .select_for_update()
            .values_list("pk", "queue_state")
        )
        by_text = {str(pk): state for pk, state in found.items()}
        for pk in pks:
            if pk not in by_text:
                raise InvalidDependency(f"parent {label} pk={pk} does not exist (on database {using!r})")
            if by_text[pk] == QueueState.RUNNING:
                raise InvalidDependency(
                    f"parent {label} pk={pk} is running: declare dependants before it is claimed"
                )
            states[(label, pk)] = by_text[pk]
    return states


def ancestors(using: str, start: Iterable[Key]) -> set[Key]:
    """Every job ``start``'s jobs wait for, transitively (one query per generation)."""
    seen: set[Key] = set()
    frontier = set(start)
    edges = JobDependency._base_manager.using(using)
    while frontier:
        query = models.Q()
        for label, pks in _by_model(frontier).items():
            query |= models.Q(wait__model=label, wait__object_pk__in=pks)
        frontier = set(edges.filter(query).values_list("parent_model", "parent_pk")) - seen
        seen |= frontier
    return seen


def _refuse_cycle(using: str, child: Key, parents: set[Key]) -> None:
    if child in parents or child in ancestors(using, parents):
        raise DependencyCycle(f"{child[0]} pk={child[1]} would depend on itself (a cycle)")
    if _waits(using).filter(model=child[0], object_pk=child[1]).exists():
        raise InvalidDependency(f"{child[0]} pk={child[1]} waits for parents already")


def _store_idle(row: QueueRow, using: str) -> None:
    """Write the dependant IDLE: new, or an existing row that is not running."""
    if row._state.adding:
        row.queue_state = QueueState.IDLE
        row.save(using=using, force_insert=True)
        return
    count = (
        _rows(row._meta.label_lower, using)
        .filter(pk=row.pk)
        .exclude(queue_state=QueueState.RUNNING)
        .update(
            queue_state=QueueState.IDLE,
            queue_attempts=0,
            queue_last_error="",
            queue_finished_at=None,
            queue_token=None,
            queue_locked_by=None,
            queue_locked_until=None,
        )
    )
    if not count:
        raise InvalidDependency(f"{row._meta.label} pk={row.pk} is running or gone: it cannot wait")


def parents_of(row: models.Model) -> list[tuple[str, str, bool]]:
    """``(model label, pk, settled)`` of each job ``row`` waits (or waited) for."""
    edges = JobDependency._base_manager.using(row._state.db)
    label, pk = key_of(row)
    found = edges.filter(wait__model=label, wait__object_pk=pk)
    return list(found.values_list("parent_model", "parent_pk", "settled"))


def dependants_of(row: models.Model) -> list[tuple[str, str, bool]]:
    """``(model label, pk, settled)`` of each job that waits (or waited) for ``row``."""
    edges = JobDependency._base_manager.using(row._state.db)
    label, pk = key_of(row)
    found = edges.filter(parent_model=label, parent_pk=pk)
    return list(found.values_list("wait__model", "wait__object_pk", "settled"))
