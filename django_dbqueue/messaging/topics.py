"""Fan-out: one copy of a message per subscriber group of its topic (docs/messaging.md).

A topic is a message kind with group handlers (``@handler("order.placed", group="billing")``).
``publish_to_topic`` inserts one ``Message`` per group in one statement; each copy carries
its group, so the worker picks that group's handler, and goes to the queue named after the
group, so ``runqueue --queue billing`` consumes that group alone. Groups never compete for
a copy; the workers of one group compete for its copies as for any message.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from ..backends import backend_for, insert_new
from ..observability import traces
from .handlers import check_group, groups_of

#: Copies per INSERT statement of a replay.
REPLAY_CHUNK = 500


def publish(
    qs: Any,
    topic: str,
    payload: Any = None,
    *,
    key: str | None = None,
    run_at: datetime | timedelta | None = None,
    priority: int = 0,
    queue: str | None = None,
    on_commit: bool = False,
) -> int | None:
    """Insert a copy for every group of ``topic``, all in one statement or none.

    The ``key`` de-duplicates per topic: when any copy of the topic has it, nothing is
    inserted (so a group declared later does not get a copy of an old key either). Two
    publishers racing with one key still leave one copy per group: the unique constraint on
    (kind, key, group) skips the second publisher's rows.
    """
    groups = groups_of(topic) if isinstance(topic, str) else []
    if not groups:
        raise ValueError(
            f"topic {topic!r} has no subscriber groups: declare one with @handler({topic!r}, group=...)"
        )
    copies = []
    for group in groups:
        copy = qs._build(topic, payload, key, run_at, priority, group if queue is None else queue)
        copy.group = group
        copies.append(copy)
    traces.stamp(qs.model, rows=copies)
    if on_commit:
        transaction.on_commit(lambda: _insert(qs, copies), using=qs.db)
        return None
    return _insert(qs, copies)


def _insert(qs: Any, copies: list[Any]) -> int:
    """Insert the copies; return how many rows this call inserted.

    With a key, a publisher that loses a race inserts nothing and counts nothing: the
    database skips its copies (the row count says so), so racing publishers' counts add up
    to the rows that exist. The copies go in group order in one statement, so the loser
    waits on the winner's first row before it writes any of its own."""
    manager = qs.model._base_manager.using(qs.db)
    first = copies[0]
    with transaction.atomic(using=qs.db):
        if first.key is None:
            manager.bulk_create(copies)
            inserted = len(copies)
        elif manager.filter(kind=first.kind, key=first.key).exists():
            return 0
        else:
            inserted = insert_new(qs.model, qs.db, copies)
    if inserted:
        backend_for(qs.db).notify([qs.model._meta.db_table])
    return inserted


def replay(qs: Any, topic: str, group: str, *, source: str, since: datetime | None = None) -> int:
    """Copy the messages of ``topic`` that group ``source`` received (since ``since``, in any
    state, while they are still in the table) to ``group``, as new READY messages. Keys stay,
    so a replay run twice, or a message the group has already, inserts nothing again.

    What ``purgequeue`` deleted or archived is not replayed: the table is the only record of
    which messages a topic had."""
    check_group(group)
    check_group(source)
    if group == source:
        raise ValueError("replay_topic: the source group must differ from the new group")
    if group not in groups_of(topic):
        raise ValueError(
            f"group {group!r} is not declared for topic {topic!r}: no handler would take the copies"
        )
    manager = qs.model._base_manager.using(qs.db)
    rows = manager.filter(kind=topic, group=source).order_by("pk")
    if since is not None:
        rows = rows.filter(queue_enqueued_at__gte=since)
    fields = ("key", "payload", "queue_priority")
    inserted, chunk = 0, []
    with transaction.atomic(using=qs.db):
        for key, payload, priority in rows.values_list(*fields).iterator(chunk_size=REPLAY_CHUNK):
            copy = qs._build(topic, payload, key, None, priority, group)
            copy.group = group
            chunk.append(copy)
            if len(chunk) == REPLAY_CHUNK:
                inserted += insert_new(qs.model, qs.db, chunk)
                chunk = []
        if chunk:
            inserted += insert_new(qs.model, qs.db, chunk)
    if inserted:
        backend_for(qs.db).notify([qs.model._meta.db_table])
    return inserted
