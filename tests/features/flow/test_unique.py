"""Unique jobs (issue #22): at most one active (READY/RUNNING) row per key, enforced by the
database's unique index on a generated column; what a duplicate enqueue does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import timedelta

import pytest
from django.core import checks
from django.db import IntegrityError, connection, models, transaction
from django.test.utils import isolate_apps
from django.utils import timezone

from django_dbqueue.exceptions import DuplicateJob
from django_dbqueue.flow.unique import QueueUniqueKey, enqueue_unique
from django_dbqueue.models import QueueMixin
from django_dbqueue.states import QueueState
from django_dbqueue.worker import Worker
from tests.conftest import ROOT, every_database
from tests.testapp.models import UniqueJob

pytestmark = [
    pytest.mark.django_db(transaction=True),
    every_database(
        "a duplicate's IntegrityError aborts PostgreSQL's whole transaction (a savepoint must "
        "hold it), where MariaDB and SQLite fail the statement only"
    ),
]


def active(key: str) -> list[UniqueJob]:
    return list(UniqueJob.objects.filter(key=key, queue_state__in=["ready", "running"]))


def test_the_key_column_holds_the_key_while_active_and_null_once_finished() -> None:
    assert UniqueJob(key="a").enqueue() is True
    row = UniqueJob.objects.get(key="a")
    assert row.queue_unique_key == "a"
    assert Worker(models=[UniqueJob], burst=True, handle_signals=False).run().succeeded == 1
    row.refresh_from_db()
    assert row.queue_state == QueueState.SUCCEEDED and row.queue_unique_key is None
    # A finished row does not block: the key is free again.
    assert UniqueJob(key="a").enqueue() is True
    assert UniqueJob.objects.filter(key="a").count() == 2 and len(active("a")) == 1


def test_ignore_returns_the_active_row_and_writes_nothing() -> None:
    first = enqueue_unique(UniqueJob(key="k", note="first"))
    again = enqueue_unique(UniqueJob(key="k", note="second", queue_priority=9), on_duplicate="ignore")
    assert first.created and not again.created
    assert again.row.pk == first.row.pk and again.row.note == "first" and again.row.queue_priority == 0
    assert UniqueJob.objects.count() == 1


def test_replace_moves_the_ready_row_to_the_new_run_time_and_priority() -> None:
    enqueue_unique(UniqueJob(key="k"))
    later = timezone.now() + timedelta(hours=1)
    result = enqueue_unique(UniqueJob(key="k", queue_priority=7, queue_run_at=later), on_duplicate="replace")
    assert not result.created
    row = UniqueJob.objects.get()
    assert row.queue_priority == 7 and abs(row.queue_run_at - later) < timedelta(seconds=1)


def test_replace_leaves_a_running_duplicate_to_its_worker() -> None:
    enqueue_unique(UniqueJob(key="k"))
    [claimed] = UniqueJob.objects.claim(1)
    result = enqueue_unique(UniqueJob(key="k", queue_priority=7), on_duplicate="replace")
    assert not result.created and result.row.pk == claimed.pk
    row = UniqueJob.objects.get()
    assert row.queue_state == QueueState.RUNNING and row.queue_priority == 0


def test_raise_raises_and_leaves_the_callers_transaction_usable() -> None:
    first = enqueue_unique(UniqueJob(key="k"))
    with transaction.atomic():
        with pytest.raises(DuplicateJob) as raised:
            UniqueJob(key="k").enqueue(on_duplicate="raise")
        assert raised.value.existing.pk == first.row.pk
        UniqueJob.objects.create(key="other")  # the transaction goes on
    assert UniqueJob.objects.count() == 2


def test_a_policy_that_does_not_exist_is_refused_before_anything_is_written() -> None:
    with pytest.raises(ValueError, match="on_duplicate must be one of"):
        UniqueJob(key="k").enqueue(on_duplicate="merge")
    with pytest.raises(ValueError, match="on_duplicate must be one of"):
        UniqueJob.objects.bulk_enqueue([UniqueJob(key="k")], on_duplicate="skip")
    assert UniqueJob.objects.count() == 0


def test_bulk_enqueue_applies_the_policy_row_by_row() -> None:
    enqueue_unique(UniqueJob(key="a"))
    rows = [{"key": "a"}, {"key": "b"}, {"key": "b"}, {"key": "c"}]
    assert UniqueJob.objects.bulk_enqueue(rows) == 2  # b and c; a and the second b are ignored
    assert sorted(UniqueJob.objects.values_list("key", flat=True)) == ["a", "b", "c"]
    with pytest.raises(DuplicateJob):
        UniqueJob.objects.bulk_enqueue([{"key": "d"}, {"key": "a"}], on_duplicate="raise")
    assert not UniqueJob.objects.filter(key="d").exists()  # all or nothing


def test_a_retried_row_keeps_its_key_and_a_requeued_one_gets_the_policy() -> None:
    UniqueJob(key="k", fail_times=1).enqueue()
    Worker(models=[UniqueJob], burst=True, handle_signals=False, max_jobs=1).run()
    row = UniqueJob.objects.get()
    assert row.queue_state == QueueState.READY and row.queue_attempts == 1  # retried: still active
    assert row.queue_unique_key == "k"
    UniqueJob.objects.filter(pk=row.pk).update(queue_state=QueueState.FAILED)
    UniqueJob(key="k").enqueue()  # a newer row takes the key
    # Re-queueing the failed one: its key is taken; the policy decides, nothing is written.
    assert row.enqueue() is False
    with pytest.raises(DuplicateJob):
        row.enqueue(on_duplicate="raise")
    assert UniqueJob.objects.get(pk=row.pk).queue_state == QueueState.FAILED
    # A bulk re-queue is one UPDATE: the database refuses all of it.
    with pytest.raises(IntegrityError):
        with transaction.atomic():
            UniqueJob.objects.filter(pk=row.pk).retry_now()
    assert UniqueJob.objects.get(pk=row.pk).queue_state == QueueState.FAILED


def test_every_way_out_of_active_frees_the_key() -> None:
    for key in "abc":
        UniqueJob(key=key).enqueue()
    UniqueJob.objects.filter(key="a").cancel()
    [claimed] = UniqueJob.objects.filter(key="b").claim(1)
    claimed.mark_failed("no")  # retried: still active
    UniqueJob.objects.filter(key="c").update(queue_state=QueueState.SUCCEEDED)
    keys = dict(UniqueJob.objects.values_list("key", "queue_unique_key"))
    assert keys == {"a": None, "b": "b", "c": None}


@isolate_apps("tests.testapp")
def test_system_checks_catch_a_policy_without_the_column_and_a_policy_that_does_not_exist() -> None:
    from django_dbqueue.checks import _check_unique

    class NoColumn(QueueMixin):
        queue_unique = "ignore"

        class Meta(QueueMixin.Meta):
            app_label = "testapp"

    class BadPolicy(QueueMixin):
        key = models.CharField(max_length=10)
        queue_unique_key = QueueUniqueKey("key")
        queue_unique = "merge"

        class Meta(QueueMixin.Meta):
            app_label = "testapp"

    assert [e.id for e in _check_unique(NoColumn)] == ["django_dbqueue.E041"]
    assert [e.id for e in _check_unique(BadPolicy)] == ["django_dbqueue.E040"]
    assert all(isinstance(e, checks.Error) for e in _check_unique(BadPolicy))


def test_a_key_field_needs_its_fields_and_migrates_as_them() -> None:
    with pytest.raises(TypeError, match="names of the fields"):
        QueueUniqueKey()
    field = QueueUniqueKey("a", "b", max_length=100)
    field.set_attributes_from_name("queue_unique_key")
    assert field.deconstruct()[1:] == (
        "django_dbqueue.flow.unique.QueueUniqueKey",
        ["a", "b"],
        {"max_length": 100},
    )


# -- real processes ------------------------------------------------------------------------------

RACE = """
import json, os, sys, time
import django
django.setup()
from django_dbqueue.exceptions import DuplicateJob
from django_dbqueue.flow import enqueue_unique
from tests.testapp.models import UniqueJob
policy, start, keys, me = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
time.sleep(max(0.0, start - time.time()))
created = raised = 0
for key in range(keys):
    try:
        created += enqueue_unique(UniqueJob(key=f"k{key}", queue_priority=me), on_duplicate=policy).created
    except DuplicateJob:
        raised += 1
print(json.dumps({"created": created, "raised": raised}))
"""


@pytest.mark.processes
@pytest.mark.parametrize("policy", ["ignore", "replace", "raise"])
def test_four_processes_enqueueing_the_same_keys_at_once_leave_one_active_row_per_key(policy) -> None:
    keys = 30
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DBQUEUE_TEST_DB_NAME": str(connection.settings_dict["NAME"]),
    }
    connection.close()
    start = time.time() + 3  # all four are up and waiting by then
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACE, policy, str(start), str(keys), str(me)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for me in range(1, 5)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert sum(r["created"] for r in results) == keys
    assert UniqueJob.objects.count() == keys
    assert sorted(UniqueJob.objects.values_list("queue_unique_key", flat=True)) == sorted(
        f"k{k}" for k in range(keys)
    )
    if policy == "raise":
        assert sum(r["raised"] for r in results) == 3 * keys
    else:
        assert sum(r["raised"] for r in results) == 0
    if policy == "ignore":
        # Nothing but the inserts was written: each row has its own inserter's priority.
        assert set(UniqueJob.objects.values_list("queue_priority", flat=True)) <= {1, 2, 3, 4}


def test_the_admin_says_why_a_retry_that_would_duplicate_an_active_key_changed_nothing(admin_client) -> None:
    from django.urls import reverse

    old = UniqueJob.objects.create(key="k", queue_state=QueueState.FAILED)
    UniqueJob(key="k").enqueue()
    url = reverse("admin:testapp_uniquejob_changelist")
    data = {"action": "dbqueue_retry_now", "_selected_action": [str(old.pk)], "index": "0"}
    response = admin_client.post(url, data, follow=True)
    assert response.status_code == 200
    assert "the database refused the whole action" in " ".join(str(m) for m in response.context["messages"])
    button = reverse("admin:testapp_uniquejob_dbqueue_row", args=[old.pk, "retry"])
    response = admin_client.post(button, follow=True)
    assert response.status_code == 200
    assert "Nothing was changed" in " ".join(str(m) for m in response.context["messages"])
    assert UniqueJob.objects.get(pk=old.pk).queue_state == QueueState.FAILED
