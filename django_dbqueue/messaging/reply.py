"""Request-reply through the database (docs/messaging.md).

``Message.objects.request(kind, payload, timeout=5)`` inserts the request (a READY message
marked ``expects_reply``) and an empty :class:`Reply` slot keyed by it, in one transaction,
then waits outside any transaction. The worker's handler returns the reply; ``deliver``
fills the slot only while it is still empty (``replied = False``), so a retried handler or a
late worker cannot reply twice, and a slot the caller removed at its timeout takes no reply.
The caller reads the reply and deletes the slot in one statement's worth of certainty (the
DELETE's row count): delivered once. PostgreSQL wakes the caller by NOTIFY; elsewhere it
polls its own slot by primary key, 5 ms at first, backing off to 50 ms.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from datetime import timedelta
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.transaction import TransactionManagementError

from ..backends import DbNow, backend_for, db_now_plus
from ..exceptions import Discard, ReplyTimeout, RequestFailed
from ..states import QueueState
from ..tables.reply import Reply
from .handlers import get_handler, groups_of

#: A slot outlives its caller's timeout by this much before the sweep may delete it.
GRACE = timedelta(seconds=60)
#: Polling pauses (seconds) where the database cannot notify, and the re-check on PostgreSQL
#: (a failed request sends no notification).
FIRST_POLL, LAST_POLL, NOTIFIED_RECHECK = 0.005, 0.05, 0.25
#: How often the waiting caller also looks at the request's state (failed for good?).
STATE_CHECK = 0.25


def request(
    qs: Any, kind: str, payload: Any = None, *, timeout: float, queue: str = "default", priority: int = 0
) -> Any:
    """Publish a request to ``kind``'s handler and return what the handler returned.

    Raises :class:`ReplyTimeout` after ``timeout`` seconds (nothing left behind) and
    :class:`RequestFailed` when the handler failed for good first."""
    check_timeout(timeout)
    if get_handler(kind) is None:
        groups = groups_of(kind) if isinstance(kind, str) else []
        topic = (
            f" ({kind!r} is a topic of groups {', '.join(groups)}; a request has one handler)"
            if groups
            else ""
        )
        raise ValueError(
            f"no handler is registered for {kind!r}: a request to it would never be answered{topic}"
        )
    using = qs.db or DEFAULT_DB_ALIAS
    refuse_in_transaction(using, "Message.objects.request()")
    message = qs._build(kind, payload, None, None, priority, queue)
    message.expects_reply = True
    seconds = timedelta(seconds=timeout)
    with transaction.atomic(using=using):
        message.save(using=using, force_insert=True)  # post_save wakes the workers
        replies = Reply.objects.using(using)
        reply = replies.create(request_id=message.pk, expires_at=db_now_plus(seconds + GRACE))
        # created_at is auto_now_add (this host's clock): the database's instead.
        replies.filter(pk=reply.pk).update(created_at=DbNow())
    return _wait(using, message, time.monotonic() + timeout, timeout)


def check_timeout(timeout: Any) -> float:
    """A caller's wait in seconds: a finite positive number, or a clear error."""
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not math.isfinite(timeout):
        raise TypeError(f"timeout must be a number of seconds, not {timeout!r}")
    if timeout <= 0:
        raise ValueError(f"timeout must be positive, not {timeout!r}")
    return float(timeout)


def refuse_in_transaction(using: str, what: str) -> None:
    """Waiting for a worker inside a transaction cannot work: the worker does not see what the
    transaction wrote before it commits, and under REPEATABLE READ (MySQL's default) the
    waiter would not see the worker's writes either."""
    if connections[using].in_atomic_block:
        raise TransactionManagementError(
            f"{what} inside a transaction: the worker cannot see what it has not committed, "
            "so the wait could only time out; call it outside atomic()"
        )


def deliver(message: Any, result: Any) -> None:
    """Fill the request's reply slot (called in ``Message.process`` after the handler)."""
    try:
        json.dumps(result)
    except (TypeError, ValueError) as exc:
        raise Discard(f"the reply of {message.kind!r} is not JSON-serialisable: {exc}") from exc
    using = message._state.db or DEFAULT_DB_ALIAS
    filled = Reply.objects.using(using).filter(request_id=message.pk, replied=False)
    if filled.update(replied=True, payload=result):
        backend_for(using).notify([_channel(message.pk)])


def _channel(pk: int) -> str:
    return f"reply:{pk}"


def _wait(using: str, message: Any, deadline: float, timeout: float) -> Any:
    listening = _register(using, message.pk)
    event = listening[1] if listening else None
    pause, next_state_check = FIRST_POLL, time.monotonic() + STATE_CHECK
    try:
        while True:
            found, payload = _take(using, message.pk)
            if found:
                return payload
            now = time.monotonic()
            if now >= next_state_check:
                next_state_check = now + STATE_CHECK
                failed = _failure(using, message)
                found, payload = _take(using, message.pk) if failed else (False, None)
                if found:  # replied, then failed (a run that lost its lease): the reply counts
                    return payload
                if failed is not None:
                    _forget(using, message)
                    raise RequestFailed(f"request #{message.pk} to {message.kind!r} failed: {failed}")
            if now >= deadline:
                _forget(using, message)
                raise ReplyTimeout(f"no reply to request #{message.pk} ({message.kind!r}) within {timeout}s")
            if event is not None:
                event.wait(min(deadline - now, NOTIFIED_RECHECK))
                event.clear()
            else:
                time.sleep(min(deadline - now, pause))
                pause = min(pause * 1.5, LAST_POLL)
    finally:
        if listening:
            listening[0].unregister(message.pk)


def _take(using: str, pk: int) -> tuple[bool, Any]:
    row = Reply.objects.using(using).filter(request_id=pk, replied=True).values_list("pk", "payload").first()
    if row is None:
        return False, None
    # Delivered once: only the caller whose DELETE removed the slot returns its payload.
    deleted, _ = Reply.objects.using(using).filter(pk=row[0]).delete()
    return bool(deleted), row[1]


def _failure(using: str, message: Any) -> str | None:
    state = (
        type(message)
        ._base_manager.using(using)
        .filter(pk=message.pk)
        .values_list("queue_state", "queue_last_error")
    )
    row = state.first()
    if row is None:
        return "the request was deleted"
    if row[0] in (QueueState.FAILED, QueueState.CANCELLED):
        return (row[1] or row[0]).strip().splitlines()[-1]
    return None


def _forget(using: str, message: Any) -> None:
    """The caller stops waiting: remove its slot (a late reply then fills nothing) and the
    request if no worker has taken it yet. A running request finishes as a normal message."""
    with transaction.atomic(using=using):
        Reply.objects.using(using).filter(request_id=message.pk).delete()
        type(message)._base_manager.using(using).filter(pk=message.pk, queue_state=QueueState.READY).delete()


class _Waiters:
    """One LISTEN connection per process and database, shared by every waiting caller: a
    notification ``reply:<pk>`` sets that caller's event. It closes after ``LINGER`` seconds
    without callers (a process that asks once does not keep a session open for ever)."""

    LINGER = 2.0

    def __init__(self, using: str) -> None:
        self.using = using
        self.backend = backend_for(using)
        self.events: dict[int, threading.Event] = {}
        self.idle_since = time.monotonic()
        self.stop = _IdleStop(self)
        self.thread = threading.Thread(target=self._run, name="dbqueue-replies", daemon=True)
        self.thread.start()

    def unregister(self, pk: int) -> None:
        with _lock:
            self.events.pop(pk, None)
            self.idle_since = time.monotonic()

    def close_if_idle(self) -> None:
        with _lock:
            if not self.events and time.monotonic() - self.idle_since > self.LINGER:
                self.stop.set()
                if _listeners.get((self.using, os.getpid())) is self:
                    del _listeners[(self.using, os.getpid())]

    def _note(self, payload: str) -> None:
        prefix, _, pk = payload.partition(":")
        if prefix == "reply" and pk.isdigit():
            with _lock:
                event = self.events.get(int(pk))
            if event is not None:
                event.set()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                self.backend.listen_notes(self._note, self.stop)
            except Exception:  # noqa: BLE001 - reconnect; the waiters' re-check covers the gap
                self.stop.wait(1.0)


class _IdleStop(threading.Event):
    """The listener's stop signal, which also comes when its callers have been gone a while
    (asked every half second by the listening loop)."""

    def __init__(self, waiters: _Waiters) -> None:
        super().__init__()
        self.waiters = waiters

    def is_set(self) -> bool:
        if not super().is_set():
            self.waiters.close_if_idle()
        return super().is_set()


#: By (database, process): a forked child starts its own listener thread.
_listeners: dict[tuple[str, int], _Waiters] = {}
_lock = threading.Lock()


def _register(using: str, pk: int) -> tuple[_Waiters, threading.Event] | None:
    """Listen for ``pk``'s reply where the database can notify (None: poll)."""
    if not backend_for(using).can_notify:
        return None
    slot, event = (using, os.getpid()), threading.Event()
    with _lock:
        if slot not in _listeners:
            _listeners[slot] = _Waiters(using)
        _listeners[slot].events[pk] = event
        return _listeners[slot], event


def close_listeners() -> None:
    """Close this process's reply listeners now (tests, before dropping their database)."""
    with _lock:
        waiters = [w for (_, pid), w in _listeners.items() if pid == os.getpid()]
        for w in waiters:
            w.stop.set()
            _listeners.pop((w.using, os.getpid()), None)
    for w in waiters:
        w.thread.join(timeout=5)
