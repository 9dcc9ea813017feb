"""The workflow tables' rows of queue rows that are gone: deleted with them, or swept later.

A workflow row's checkpoints, events and progress are keyed by its model's label and its
primary key, with no foreign key (any model can be a workflow, and the app's tables import
nothing of it). So a deleted row would leave them behind for good, and a new row that reuses
the primary key (SQLite reuses the highest one; any database after a truncation) would replay
the old row's checkpoints as its own. Three ways remove them:

* ``purgequeue`` deletes them with the rows it purges, in the same transaction and batch
  (:func:`delete_for`: one DELETE per table, an IN list no longer than the batch);
* receivers of ``pre_delete`` and ``post_delete`` on each model whose handler is a
  ``@workflow`` delete them with rows deleted through the ORM (the admin, ``row.delete()``,
  ``queryset.delete()``), in the delete's transaction, a batch at a time
  (:class:`DeleteReceivers`; ``signal_handlers.connect_workflow_cleanup``);
* ``purgequeue --workflow-orphans`` sweeps those left by deletes no receiver saw (raw SQL, a
  message handler's workflow deleted in the admin, rows deleted before this existed):
  :func:`sweep_orphans`, in batches by the tables' own primary keys.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Model

from ..tables.workflow import WorkflowEvent, WorkflowProgress, WorkflowStep

if TYPE_CHECKING:
    from ..queue.row import QueueRow

#: The tables keyed by (model label, object_pk).
TABLES: tuple[type[Model], ...] = (WorkflowStep, WorkflowEvent, WorkflowProgress)


def delete_for(model: type[Model], pks: Iterable[Any], using: str) -> int:
    """Delete the checkpoints, events and progress of ``model``'s rows ``pks``, in the
    caller's transaction: one DELETE per table (its IN list is ``pks``: the caller bounds it).
    Returns how many rows of the three tables went."""
    keys = [str(pk) for pk in pks]
    if not keys:
        return 0
    label = model._meta.label
    deleted = 0
    for table in TABLES:
        # Each table's unique key or index starts with (model, object_pk): an index range each.
        deleted += table._default_manager.using(using).filter(model=label, object_pk__in=keys).delete()[0]
    return deleted


#: Rows per DELETE of the receivers (an IN list, bounded like purgequeue's batches).
CHUNK = 1000


@dataclass
class _Deleting:
    """The rows of one model that one delete (``origin``: the queryset or instance deleted) is
    deleting, seen by ``pre_delete``; ``left``: their ``post_delete`` not come yet."""

    origin: Any  # kept alive, so no other delete's origin gets its id meanwhile
    pks: list[Any] = field(default_factory=list)
    left: int = 0


class DeleteReceivers:
    """A deleted workflow row's checkpoints, events and progress go in the delete's own
    transaction, so a new row under its pk starts afresh.

    Django's delete sends ``pre_delete`` for every row, deletes them, then sends ``post_delete``
    for every row, all inside one transaction (``Collector.delete``). A receiver per row would
    cost three DELETEs per row; these note the rows at ``pre_delete`` and, at the first
    ``post_delete`` of that delete, remove the workflow rows of those of them that are gone
    (one SELECT and three DELETEs per ``CHUNK`` rows). The check that they are gone keeps the
    workflow rows of a delete that failed before it reached the rows (its notes are stale)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def _pending(self) -> dict[tuple[int, type[Model], str], _Deleting]:
        pending = getattr(self._local, "pending", None)
        if pending is None:
            pending = self._local.pending = {}
        return pending

    def before(self, sender: type[QueueRow], instance: QueueRow, using: str, **kwargs: Any) -> None:
        """``pre_delete``: note the row."""
        origin = kwargs.get("origin")
        entry = self._pending().setdefault((id(origin), sender, using), _Deleting(origin))
        entry.pks.append(instance.pk)
        entry.left += 1

    def after(self, sender: type[QueueRow], instance: QueueRow, using: str, **kwargs: Any) -> None:
        """``post_delete``: the first of a delete removes the workflow rows of all its rows."""
        key = (id(kwargs.get("origin")), sender, using)
        entry = self._pending().get(key)
        if entry is None:  # no pre_delete seen (connected in between): this row alone
            delete_for(sender, [instance.pk], using)
            return
        if entry.pks:
            for start in range(0, len(entry.pks), CHUNK):
                _delete_gone(sender, entry.pks[start : start + CHUNK], using)
            entry.pks = []
        entry.left -= 1
        if entry.left <= 0:
            del self._pending()[key]


def _delete_gone(model: type[Model], pks: list[Any], using: str) -> None:
    still = set(model._base_manager.using(using).filter(pk__in=pks).values_list("pk", flat=True))
    delete_for(model, [pk for pk in pks if pk not in still], using)


#: The receivers ``signal_handlers.connect_workflow_cleanup`` connects.
receivers = DeleteReceivers()


@dataclass
class Swept:
    """What a sweep found: orphans deleted (or counted) per table, and the labels of models
    not installed, whose rows it leaves alone."""

    deleted: dict[str, int] = field(default_factory=dict)
    unknown: set[str] = field(default_factory=set)


def sweep_orphans(using: str, batch_size: int, pause: float, dry_run: bool = False) -> Swept:
    """Delete (or count, with ``dry_run``) the workflow rows whose queue row is gone, reading
    each table in batches of ``batch_size`` by its primary key, ``pause`` seconds between
    batches. A label whose model is not installed is left alone (an app switched off for a
    while is not proof its rows are gone) and reported."""
    swept = Swept()
    for table in TABLES:
        swept.deleted[table.__name__] = 0
        last: Any = None
        while True:
            last, read = _sweep_batch(table, using, batch_size, last, swept, dry_run)
            if read < batch_size:
                break
            time.sleep(pause)
    return swept


def _sweep_batch(
    table: type[Model], using: str, size: int, last: Any, swept: Swept, dry_run: bool
) -> tuple[Any, int]:
    """One batch of ``table`` after the pk ``last``: its orphans deleted in the transaction
    that found them, by the table's own pk, so a row created meanwhile under a reused pk keeps
    the checkpoints it writes (they have new pks). Returns the batch's last pk and its size."""
    with transaction.atomic(using=using):
        rows = table._default_manager.using(using).order_by("pk")
        if last is not None:
            rows = rows.filter(pk__gt=last)
        batch = list(rows.values_list("pk", "model", "object_pk")[:size])
        orphans = _orphans(batch, using, swept)
        if orphans and not dry_run:
            table._default_manager.using(using).filter(pk__in=orphans).delete()
    swept.deleted[table.__name__] += len(orphans)
    return (batch[-1][0] if batch else last), len(batch)


def _orphans(batch: list[tuple[Any, str, str]], using: str, swept: Swept) -> list[Any]:
    """The pks of the entries of ``batch`` whose row does not exist: one query per model."""
    by_model: dict[str, dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))
    for pk, label, object_pk in batch:
        by_model[label][object_pk].append(pk)
    orphans: list[Any] = []
    for label, entries in by_model.items():
        model = _installed(label)
        if model is None:
            swept.unknown.add(label)
            continue
        alive = _existing(model, entries, using)
        orphans += [pk for object_pk, pks in entries.items() if object_pk not in alive for pk in pks]
    return orphans


def _installed(label: str) -> type[Model] | None:
    try:
        return apps.get_model(label)
    except (LookupError, ValueError):
        return None


def _existing(model: type[Model], object_pks: Iterable[str], using: str) -> set[str]:
    """Which of ``object_pks`` (as the workflow tables store them) name a row of ``model``."""
    typed = {}
    for object_pk in object_pks:
        try:
            typed[model._meta.pk.to_python(object_pk)] = object_pk
        except ValidationError:
            continue  # no row can have it: an orphan
    found = model._base_manager.using(using).filter(pk__in=list(typed)).values_list("pk", flat=True)
    return {typed[pk] for pk in found}
