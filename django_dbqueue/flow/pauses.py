"""Paused queues: pause, resume, and what a claim must hold back.

A pause is a row of ``QueuePause`` in the queue's database, so it holds on every host and
survives restarts. A claim reads that (tiny) table at most once per
``DBQUEUE_POLL_INTERVAL`` per process and database, from a cache: with nothing paused a
claim sends the same statements as without the feature, and every host's workers see a pause
(or a resume) within one poll interval. ``pause()``/``resume()`` forget the cache of their
own process at once.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from django.apps import apps
from django.db import DEFAULT_DB_ALIAS, models, router

from ..backends import DbNow, backend_for
from ..conf import settings
from ..messaging.handlers import NAME
from ..tables.flow import QueuePause

#: What a claim holds back: every row of the model.
ALL = "*"

_lock = threading.Lock()
#: alias -> (monotonic time the snapshot expires, {(model label, queue name)}).
_snapshots: dict[str, tuple[float, frozenset[tuple[str, str]]]] = {}


def _pause_model() -> type[models.Model]:
    return QueuePause


def resolve(target: type[models.Model] | str) -> type[models.Model]:
    """A queue model from a class or an ``app_label.Model`` label; ValueError otherwise."""
    if isinstance(target, str):
        try:
            model = apps.get_model(target)
        except (LookupError, ValueError):
            raise ValueError(
                f"unknown model {target!r}: name an installed queue model, app_label.Model"
            ) from None
    else:
        model = target
    fields = {f.name for f in model._meta.concrete_fields} if isinstance(model, type) else set()
    if "queue_state" not in fields or not hasattr(model, "queue_queryset") or model._meta.abstract:
        raise ValueError(f"{target!r} is not a concrete QueueMixin model: only queues can be paused")
    return model


def _key(target: type[models.Model] | str, queue: str | None) -> tuple[type[models.Model], str]:
    model = resolve(target)
    queue = queue or ""
    if not isinstance(queue, str):
        raise TypeError(f"queue must be a queue name (str), not {queue!r}")
    # The rule publish() and enqueue apply: a name no row can carry would pause nothing, and
    # one over the column's 64 characters is a database error, not a message.
    if queue and (not NAME.match(queue) or len(queue) > 64):
        raise ValueError(f"queue name {queue!r}: use 1-64 letters, digits and _ . : -")
    if queue and not any(f.name == "queue" for f in model._meta.concrete_fields):
        raise ValueError(f"{model._meta.label} has no named queues (no 'queue' column): pause the model")
    return model, queue


def _alias(model: type[models.Model], using: str | None) -> str:
    return using or router.db_for_write(model) or DEFAULT_DB_ALIAS


def pause(
    target: type[models.Model] | str, queue: str | None = None, *, using: str | None = None, by: str = ""
) -> bool:
    """Stop claims from a model (or one named queue of it) on every host; running jobs
    finish. True if it was not paused already."""
    model, queue = _key(target, queue)
    alias = _alias(model, using)
    rows = _pause_model()._default_manager.using(alias)
    row, created = rows.get_or_create(model=model._meta.label, queue=queue, defaults={"paused_by": by[:255]})
    if created:  # paused_at is auto_now_add (this host's clock): the database's instead
        rows.filter(pk=row.pk).update(paused_at=DbNow())
    forget(alias)
    return created


def resume(target: type[models.Model] | str, queue: str | None = None, *, using: str | None = None) -> bool:
    """Let workers claim from it again (idle PostgreSQL workers are woken at once). True if
    it was paused."""
    model, queue = _key(target, queue)
    alias = _alias(model, using)
    deleted, _ = (
        _pause_model()._default_manager.using(alias).filter(model=model._meta.label, queue=queue).delete()
    )
    forget(alias)
    if deleted:
        backend_for(alias).notify([model._meta.db_table])
    return bool(deleted)


def pauses(using: str = DEFAULT_DB_ALIAS) -> list[Any]:
    """The paused queues of a database, as ``QueuePause`` rows (read now, not cached)."""
    return list(_pause_model()._default_manager.using(using).order_by("model", "queue"))


def is_paused(
    target: type[models.Model] | str, queue: str | None = None, *, using: str | None = None
) -> bool:
    model, queue = _key(target, queue)
    rows = _pause_model()._default_manager.using(_alias(model, using)).filter(model=model._meta.label)
    return rows.filter(queue__in={"", queue}).exists()


def paused_queues(model: type[models.Model], *, using: str | None = None) -> list[str]:
    """The model's paused queues now ("" for the whole model), from the table, not the cache."""
    rows = _pause_model()._default_manager.using(_alias(model, using)).filter(model=model._meta.label)
    return sorted(rows.values_list("queue", flat=True))


def forget(using: str | None = None) -> None:
    """Drop the cached snapshot (of one database, or all): the next claim reads the table."""
    with _lock:
        if using is None:
            _snapshots.clear()
        else:
            _snapshots.pop(using, None)


def _snapshot(using: str) -> frozenset[tuple[str, str]]:
    now = time.monotonic()
    cached = _snapshots.get(using)
    if cached is not None and cached[0] > now:
        return cached[1]
    paused = frozenset(_pause_model()._default_manager.using(using).values_list("model", "queue"))
    # Cached even when read inside a transaction: a pause rolled back with it is held for one
    # poll interval at most, as a pause another host lifted is.
    with _lock:
        _snapshots[using] = (now + settings.POLL_INTERVAL, paused)
    return paused


def held_back(model: type[models.Model], using: str) -> str | frozenset[str] | None:
    """What a claim from ``model`` must skip: ``ALL``, a set of queue names, or None."""
    label = model._meta.label
    queues = frozenset(queue for paused_label, queue in _snapshot(using) if paused_label == label)
    if not queues:
        return None
    return ALL if "" in queues else queues


def unpaused(qs: Any) -> Any:
    """A queue QuerySet less its paused queues; None when the whole model is paused."""
    held = held_back(qs.model, qs.db)
    if held is None:
        return qs
    return None if held == ALL else qs.exclude(queue__in=held)
