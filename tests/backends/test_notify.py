"""``notify``, ``listen`` and ``listen_notes``: on PostgreSQL a NOTIFY from one session wakes a
listener on another, once per table per transaction, and only if the transaction commits;
elsewhere ``notify`` is a no-op and the listeners refuse at once instead of blocking."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from django.db import transaction

from django_dbqueue.backends.base import QueueBackend
from tests.conftest import wait_until

from .conftest import in_thread, only

TIMEOUT = 15


class Notes:
    """``listen_notes`` on its own thread (and session), collecting what it hears."""

    def __init__(self, backend: QueueBackend) -> None:
        self.heard: list[str] = []
        self.stop = threading.Event()
        self.done = in_thread(lambda: backend.listen_notes(self.heard.append, self.stop))

    def ready(self, backend: QueueBackend) -> None:
        # LISTEN runs on the listener's own session: until it has, a NOTIFY is lost. Ping
        # until one is heard (a condition, not a sleep), then forget the pings.
        def heard_a_ping() -> bool:
            backend.notify(["ping"])
            return "ping" in self.heard

        assert wait_until(heard_a_ping, timeout=TIMEOUT, interval=0.05)

    def until(self, note: str) -> list[str]:
        """What was heard after the pings, up to and including ``note`` (sent by the caller)."""
        assert wait_until(lambda: note in self.heard, timeout=TIMEOUT)
        return [n for n in self.heard if n != "ping"]


@pytest.fixture
def notes(backend: QueueBackend) -> Iterator[Notes]:
    listener = Notes(backend)
    listener.ready(backend)
    yield listener
    listener.stop.set()
    listener.done.result(timeout=TIMEOUT)  # returns within its poll (0.5 s) of the stop


@only("postgresql", reason="only PostgreSQL has LISTEN/NOTIFY (can_notify)")
def test_a_notify_from_another_session_wakes_the_listener(backend: QueueBackend) -> None:
    wake, stop = threading.Event(), threading.Event()
    listening = in_thread(lambda: backend.listen(["conformance_jobs"], wake, stop))
    try:

        def woken() -> bool:
            backend.notify(["conformance_jobs"])  # this thread's session, not the listener's
            return wake.wait(0.05)

        assert wait_until(woken, timeout=TIMEOUT, interval=0)
        wake.clear()
        backend.notify(["conformance_other"])  # another table: not this listener's
        backend.notify(["conformance_jobs"])
        assert wake.wait(TIMEOUT)
    finally:
        stop.set()
        listening.result(timeout=TIMEOUT)


@only("postgresql", reason="only PostgreSQL has LISTEN/NOTIFY (can_notify)")
def test_notes_carry_their_text_in_order(backend: QueueBackend, notes: Notes) -> None:
    backend.notify(["conformance_b", "conformance_a", "reply:42"])
    backend.notify(["end"])
    # One NOTIFY per name, sorted (a deterministic order, whatever the caller's iterable).
    assert notes.until("end") == ["conformance_a", "conformance_b", "reply:42", "end"]


@only("postgresql", reason="only PostgreSQL has LISTEN/NOTIFY (can_notify)")
def test_inside_a_transaction_once_per_table_and_only_on_commit(backend: QueueBackend, notes: Notes) -> None:
    with transaction.atomic():
        backend.notify(["conformance_jobs"])
        backend.notify(["conformance_jobs", "conformance_more"])
        backend.notify(["end_of_commit"])
    with pytest.raises(RuntimeError), transaction.atomic():
        backend.notify(["rolled_back"])
        raise RuntimeError("roll back")
    backend.notify(["end"])
    assert notes.until("end") == ["conformance_jobs", "conformance_more", "end_of_commit", "end"]


@only("mysql", "sqlite", reason="PostgreSQL's channel is checked above")
def test_without_a_channel_notify_is_a_no_op_and_listening_refuses(backend: QueueBackend) -> None:
    assert backend.can_notify is False
    with transaction.atomic():
        assert backend.notify(["conformance_jobs"]) is None
    assert backend.notify(["conformance_jobs"]) is None
    stop = threading.Event()  # never set: a listener that blocked would hang here
    started = time.monotonic()
    with pytest.raises(NotImplementedError, match="no notification channel"):
        backend.listen(["conformance_jobs"], threading.Event(), stop)
    with pytest.raises(NotImplementedError, match="no notification channel"):
        backend.listen_notes(lambda note: None, stop)
    assert time.monotonic() - started < 1


@only("postgresql", reason="only PostgreSQL has LISTEN/NOTIFY (can_notify)")
def test_a_notify_lost_with_a_savepoint_is_sent_when_asked_again(backend: QueueBackend, notes: Notes) -> None:
    with transaction.atomic():
        with pytest.raises(RuntimeError), transaction.atomic():
            backend.notify(["conformance_jobs"])  # goes with the savepoint's rollback
            raise RuntimeError("roll back the savepoint")
        backend.notify(["conformance_jobs"])  # so it must be queued again, not taken as pending
        with pytest.raises(RuntimeError), transaction.atomic():
            backend.notify(["conformance_jobs"])  # already pending outside: not queued twice
            raise RuntimeError("roll back the savepoint")
        backend.notify(["end_of_commit"])
    backend.notify(["end"])
    assert notes.until("end") == ["conformance_jobs", "end_of_commit", "end"]
