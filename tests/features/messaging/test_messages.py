"""The generic Message queue: publish with dedup keys, handlers per kind, bad input."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction

import django_dbqueue
from django_dbqueue.models import Message
from django_dbqueue.states import QueueState
from django_dbqueue.worker import Worker
from tests.conftest import every_database, run_forked
from tests.testapp.models import Ledger

pytestmark = [
    pytest.mark.django_db(transaction=True),
    every_database("publish's dedup keys go through the backend's insert_new (ON CONFLICT / INSERT IGNORE)"),
]


def drain(**kwargs):
    return Worker(models=[Message], burst=True, handle_signals=False, **kwargs).run()


def test_publish_inserts_a_ready_message_and_runs_its_handler() -> None:
    published = Message.objects.publish("test.echo", {"hello": "world"})
    assert published.created and published.message.pk
    assert published.message.queue_state == QueueState.READY
    drain()
    message = Message.objects.get()
    assert message.queue_state == QueueState.SUCCEEDED
    assert Ledger.objects.filter(kind="message", job_id=message.pk).count() == 1


def test_a_duplicate_key_is_ignored_and_says_so() -> None:
    first = Message.objects.publish("test.echo", {"n": 1}, key="welcome:42")
    again = Message.objects.publish("test.echo", {"n": 2}, key="welcome:42")
    other_kind = Message.objects.publish("test.typed", {"n": 1, "name": "x"}, key="welcome:42")
    assert first.created and not again.created and other_kind.created
    assert again.message.pk == first.message.pk and again.message.payload == {"n": 1}
    assert Message.objects.count() == 2


def _publish_all(keys: list[str], seed: int, out) -> None:
    # A separate process with its own database session.
    random.Random(seed).shuffle(keys)
    created = sum(Message.objects.publish("test.echo", {"k": k}, key=k).created for k in keys)
    out.put(created)
    connections.close_all()


@pytest.mark.skipif("connection.vendor == 'sqlite'")
def test_processes_publishing_the_same_keys_at_once_insert_each_once() -> None:
    keys = [f"order:{i}" for i in range(300)]
    created = run_forked(_publish_all, [(list(keys), seed) for seed in range(4)])
    assert sum(created) == 300
    assert Message.objects.count() == 300
    assert Message.objects.values("key").distinct().count() == 300


def test_publish_many_skips_duplicates_and_counts_inserts() -> None:
    Message.objects.publish("test.echo", key="k1")
    inserted = Message.objects.publish_many(
        [{"kind": "test.echo", "key": f"k{i}", "payload": {"i": i}} for i in range(1200)]
        + [{"kind": "test.echo", "payload": None}]
    )
    assert inserted == 1200  # 1199 new keys + the keyless one
    assert Message.objects.count() == 1201


def test_publish_in_the_callers_transaction_rolls_back_with_it() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        Message.objects.publish("test.echo", key="gone")
        raise RuntimeError("the order failed")
    assert not Message.objects.exists()


def test_on_commit_publishing_waits_for_the_commit() -> None:
    with transaction.atomic():
        assert Message.objects.publish("test.echo", key="later", on_commit=True) is None
        assert not Message.objects.exists()
    assert Message.objects.filter(key="later").exists()


def test_publish_options_queue_priority_and_delay() -> None:
    Message.objects.publish("test.echo", queue="emails", priority=7, run_at=timedelta(hours=1))
    message = Message.objects.get()
    assert (message.queue, message.queue_priority) == ("emails", 7)
    assert not Message.objects.ready().exists()


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"kind": ""}, ValueError),
        ({"kind": "bad kind!"}, ValueError),
        ({"kind": "test.echo", "queue": "no spaces"}, ValueError),
        ({"kind": "test.echo", "key": "x" * 192}, ValueError),
        ({"kind": "test.echo", "payload": {"when": object()}}, TypeError),
        ({"kind": "test.echo", "priority": "high"}, TypeError),
    ],
)
def test_bad_publish_arguments_are_refused_with_a_clear_error(kwargs, error) -> None:
    with pytest.raises(error):
        Message.objects.publish(**kwargs)
    assert not Message.objects.exists()


def test_too_large_a_payload_is_refused(settings) -> None:
    settings.DBQUEUE_MAX_PAYLOAD_BYTES = 100
    with pytest.raises(ValueError, match="DBQUEUE_MAX_PAYLOAD_BYTES"):
        Message.objects.publish("test.echo", {"blob": "x" * 200})


def test_unknown_kinds_and_invalid_payloads_end_failed_and_the_worker_goes_on() -> None:
    unknown = Message.objects.publish("test.nobody", {}).message
    invalid = Message.objects.publish("test.typed", {"n": "one"}).message
    fine = Message.objects.publish("test.typed", {"n": 3, "name": "ok"}).message
    stats = drain()
    assert stats.succeeded == 1
    unknown.refresh_from_db()
    invalid.refresh_from_db()
    fine.refresh_from_db()
    assert unknown.queue_state == QueueState.FAILED and unknown.queue_attempts == 1
    assert "no handler is registered for message kind 'test.nobody'" in unknown.queue_last_error
    assert invalid.queue_state == QueueState.FAILED
    assert "'n' is str, expected int; missing 'name'" in invalid.queue_last_error
    assert fine.queue_state == QueueState.SUCCEEDED


def test_an_undecodable_payload_ends_failed_without_breaking_the_claim() -> None:
    if not (connection.vendor == "mysql" and connection.mysql_is_mariadb):
        pytest.skip("needs MariaDB, whose JSON check constraint can be dropped")
    # Every engine guards JSON columns with a CHECK, so garbage only gets in where that
    # guard is gone (a table made or altered by other tooling): drop it, as such a table would.
    good = Message.objects.publish("test.echo", {"ok": True}).message
    bad = Message.objects.publish("test.echo", {"x": 1}).message

    def execute(sql: str, params: list | None = None) -> None:
        with connection.cursor() as cursor:  # a fresh cursor: the worker closes connections
            cursor.execute(sql, params)

    # MariaDB keeps JSON_VALID as a column-level CHECK: redefining the column drops it.
    execute("ALTER TABLE django_dbqueue_message MODIFY payload LONGTEXT NULL")
    try:
        execute("UPDATE django_dbqueue_message SET payload = %s WHERE id = %s", ["{not json", bad.pk])
        drain()
        states = dict(Message.objects.values_list("pk", "queue_state"))
        error = Message.objects.get(pk=bad.pk).queue_last_error
    finally:
        execute("DELETE FROM django_dbqueue_message")
        execute("ALTER TABLE django_dbqueue_message MODIFY payload LONGTEXT NULL CHECK (json_valid(payload))")
    assert states == {good.pk: "succeeded", bad.pk: "failed"}
    assert "not valid JSON" in error


def test_a_raising_handler_is_retried_and_keeps_its_error() -> None:
    message = Message.objects.publish("test.flaky", {}).message
    drain()
    message.refresh_from_db()
    assert message.queue_state == QueueState.READY and message.queue_attempts == 1
    assert "ConnectionError: smtp server said 421" in message.queue_last_error
    Message.objects.all().retry_now()
    drain()
    message.refresh_from_db()
    assert message.queue_state == QueueState.SUCCEEDED and message.queue_attempts == 2


def test_workers_can_consume_one_queue() -> None:
    Message.objects.publish("test.echo", queue="emails")
    Message.objects.publish("test.echo", queue="reports")
    stats = drain(queues=["emails"])
    assert stats.succeeded == 1
    assert dict(Message.objects.values_list("queue", "queue_state")) == {
        "emails": "succeeded",
        "reports": "ready",
    }


def test_handler_decorator_is_reachable_from_the_package_and_validates_kinds() -> None:
    assert django_dbqueue.handler is not None
    with pytest.raises(ValueError):
        django_dbqueue.handler("no spaces allowed")
    with pytest.raises(ValueError, match="already registered"):
        django_dbqueue.handler("test.echo")(lambda m: None)
