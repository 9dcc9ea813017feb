"""Atomic mode's idle-transaction bound (django_dbqueue/worker/idle.py): a worker cut off by the
network mid-job must not keep its row locked until the server's wait_timeout.

The end-to-end proof, over a real network partition, is tests/chaos/test_netns_quick.py; here the
bound itself is checked on the real servers: the session that sits idle in its transaction past
the bound is ended by the server, its row lock goes, and a rescuer's SKIP LOCKED finds the row.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import DatabaseError, connection, connections, transaction
from django.test import override_settings

from django_dbqueue.worker.idle import IdleTransactionGuard, idle_bounds
from tests.conftest import skip_on_sqlite
from tests.testapp.models import AtomicJob, Job, TimeoutJob


def default_db(model: type) -> str:
    return "default"


def test_the_bound_is_twice_the_longest_atomic_lease() -> None:
    assert idle_bounds([Job], default_db, None) == {}  # lease mode holds no lock while it runs
    assert idle_bounds([Job, AtomicJob], default_db, None) == {
        "default": 2 * AtomicJob.queue_lease_seconds().total_seconds()
    }
    # runqueue --lease wins over the model's lease, as for the claims; a short one gets 30 s.
    assert idle_bounds([AtomicJob], default_db, timedelta(seconds=40)) == {"default": 80.0}
    assert idle_bounds([AtomicJob], default_db, timedelta(seconds=3)) == {"default": 30.0}


def test_the_setting_fixes_or_disables_the_bound() -> None:
    with override_settings(DBQUEUE_ATOMIC_IDLE_TIMEOUT=45):
        assert idle_bounds([AtomicJob], default_db, timedelta(seconds=3)) == {"default": 45.0}
        assert idle_bounds([TimeoutJob], default_db, None) == {}  # not atomic: no bound
    with override_settings(DBQUEUE_ATOMIC_IDLE_TIMEOUT=0):
        assert idle_bounds([AtomicJob], default_db, None) == {}


def hold_row_lock(pk: int, idle: float, outcome: dict[str, object]) -> None:
    """In a session of its own: lock the row, sit idle ``idle`` s, then try a statement."""
    try:
        with transaction.atomic():
            list(AtomicJob.objects.select_for_update().filter(pk=pk))
            outcome["locked"] = True
            time.sleep(idle)
            outcome["count"] = AtomicJob.objects.count()
    except DatabaseError as exc:
        outcome["error"] = exc
    finally:
        connections.close_all()


def skipped_by_rescuer(pk: int) -> bool:
    with transaction.atomic():
        return not AtomicJob.objects.select_for_update(skip_locked=True).filter(pk=pk).exists()


@skip_on_sqlite
@pytest.mark.django_db(transaction=True)
def test_the_server_ends_an_idle_transaction_and_frees_its_row() -> None:
    if connection.vendor == "mysql" and not connection.mysql_is_mariadb:
        pytest.skip("MySQL has no idle-transaction timeout (the worker warns at start)")
    pk = AtomicJob.objects.create().pk
    guard = IdleTransactionGuard({"default": 1})
    guard.install()
    try:
        outcome: dict[str, object] = {}
        holder = threading.Thread(target=hold_row_lock, args=(pk, 3.0, outcome))
        holder.start()
        deadline = time.monotonic() + 10
        while "locked" not in outcome and time.monotonic() < deadline:
            time.sleep(0.02)
        assert skipped_by_rescuer(pk)  # held: the rescue passes it by
        time.sleep(2.0)
        assert not skipped_by_rescuer(pk)  # the server ended the idle session: the lock is gone
        holder.join()
        assert isinstance(outcome.get("error"), DatabaseError), outcome  # its late statement fails
    finally:
        guard.uninstall()
        connection.close()  # this thread's session had the bound set at install
    # Without the guard the same idle transaction lives on (the server's defaults are hours).
    outcome = {}
    holder = threading.Thread(target=hold_row_lock, args=(pk, 2.0, outcome))
    holder.start()
    holder.join()
    assert outcome.get("count") == 1 and "error" not in outcome, outcome
