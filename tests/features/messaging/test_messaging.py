"""Topics (one copy per subscriber group) and request-reply (docs/messaging.md), on a real
database, with real runqueue processes where the behaviour is about processes."""

from __future__ import annotations

import math
import random
import time
from collections import Counter
from datetime import timedelta

import django
import pytest
from django.core.management import call_command
from django.db import connections, transaction
from django.db.transaction import TransactionManagementError
from django.utils import timezone

from django_dbqueue.exceptions import ReplyTimeout, RequestFailed
from django_dbqueue.messaging.handlers import handler, unregister
from django_dbqueue.models import Message, Reply
from django_dbqueue.states import QueueState
from django_dbqueue.worker import Worker
from tests.conftest import every_database, run_forked, skip_on_sqlite, wait_until
from tests.testapp.models import Ledger

pytestmark = [
    pytest.mark.django_db(transaction=True),
    every_database(
        "request-reply waits on LISTEN/NOTIFY on PostgreSQL and polls elsewhere (can_notify, "
        "listen_notes); topics' copies go through insert_new"
    ),
]

GROUPS = ["audit", "billing", "shipping"]


def drain(**kwargs):
    return Worker(models=[Message], burst=True, handle_signals=False, **kwargs).run()


def nothing_written() -> bool:
    return not Message.objects.exists() and not Reply.objects.exists()


# -- topics ------------------------------------------------------------------------------------


def test_a_topic_message_gets_one_copy_per_group_in_the_groups_queue() -> None:
    assert Message.objects.publish_to_topic("test.topic", {"n": 1}) == 3
    copies = Message.objects.order_by("group")
    assert [(m.kind, m.group, m.queue, m.payload) for m in copies] == [
        ("test.topic", g, g, {"n": 1}) for g in GROUPS
    ]
    drain(queues=["billing"])  # one group's workers consume only that group's copies
    assert dict(Message.objects.values_list("group", "queue_state")) == {
        "audit": "ready",
        "billing": "succeeded",
        "shipping": "ready",
    }
    drain()
    assert sorted(Ledger.objects.values_list("kind", "job_id")) == [(f"topic.{g}", 1) for g in GROUPS]


def test_the_key_deduplicates_per_topic_and_a_later_group_gets_no_old_copy() -> None:
    assert Message.objects.publish_to_topic("test.topic", {"n": 1}, key="order:1") == 3
    assert Message.objects.publish_to_topic("test.topic", {"n": 1}, key="order:1") == 0
    # A plain message of another kind may use the same key.
    assert Message.objects.publish("test.echo", key="order:1").created
    handler("test.topic", group="fraud")(lambda message: None)
    try:
        assert Message.objects.publish_to_topic("test.topic", {"n": 1}, key="order:1") == 0
        assert not Message.objects.filter(group="fraud").exists()
        assert Message.objects.publish_to_topic("test.topic", {"n": 2}, key="order:2") == 4
        # Asked for: the past of another group, copied to the new one (once).
        # order:1 only: fraud had order:2's copy from its publish (the count is the rows
        # inserted, not the rows tried).
        assert Message.objects.replay_topic("test.topic", "fraud", source="billing") == 1
        # Run again, it inserts nothing, and says so (the database's count, not the tries).
        assert Message.objects.replay_topic("test.topic", "fraud", source="billing") == 0
        assert sorted(Message.objects.filter(group="fraud").values_list("key", flat=True)) == [
            "order:1",
            "order:2",
        ]
    finally:
        unregister("test.topic", "fraud")


def _publish_topic_keys(keys: list[str], seed: int, out) -> None:
    # A separate process with its own database session, publishing the keys in its own order.
    random.Random(seed).shuffle(keys)
    out.put(sum(Message.objects.publish_to_topic("test.topic", {"k": k}, key=k) for k in keys))
    connections.close_all()


@skip_on_sqlite
def test_processes_racing_over_topic_keys_report_exactly_the_copies_that_exist() -> None:
    # A publisher whose check ran before the winner committed has its copies skipped by the
    # database: it must report 0 for that key, so the reports add up to the rows (issue #31 #4).
    keys = [f"order:{i}" for i in range(60)]
    reported = run_forked(_publish_topic_keys, [(list(keys), seed) for seed in range(4)])
    assert Message.objects.count() == len(keys) * len(GROUPS)
    assert sum(reported) == Message.objects.count()
    assert Counter(Message.objects.values_list("key", flat=True)) == {k: len(GROUPS) for k in keys}


def _publish_many_keys(keys: list[str], seed: int, out) -> None:
    random.Random(seed).shuffle(keys)
    out.put(
        sum(
            Message.objects.publish_many([{"kind": "test.echo", "key": k} for k in keys[start : start + 5]])
            for start in range(0, len(keys), 5)
        )
    )
    connections.close_all()


@skip_on_sqlite
def test_processes_racing_with_publish_many_report_exactly_the_rows_that_exist() -> None:
    keys = [f"order:{i}" for i in range(200)]
    reported = run_forked(_publish_many_keys, [(list(keys), seed) for seed in range(4)])
    assert Message.objects.count() == len(keys)
    assert sum(reported) == len(keys)


def test_topic_copies_roll_back_with_the_callers_transaction() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        Message.objects.publish_to_topic("test.topic", {"n": 1})
        raise RuntimeError("the order was not placed after all")
    assert not Message.objects.exists()
    with transaction.atomic():
        assert Message.objects.publish_to_topic("test.topic", {"n": 1}, on_commit=True) is None
        assert not Message.objects.exists()
    assert Message.objects.count() == 3


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: Message.objects.publish_to_topic("test.echo", {}), "has no subscriber groups"),
        (lambda: Message.objects.publish_to_topic("no.such.topic", {}), "has no subscriber groups"),
        (lambda: Message.objects.publish_to_topic("test.topic", {}, key=""), "key must be"),
        (lambda: Message.objects.publish_to_topic("test.topic", {}, queue="a b"), "queue name"),
        (lambda: handler("test.topic", group="not valid")(print), "subscriber group"),
        (lambda: handler("test.topic", group="x" * 65)(print), "subscriber group"),
        (lambda: Message.objects.replay_topic("test.topic", "nobody", source="audit"), "not declared"),
    ],
)
def test_bad_topic_input_is_refused_and_writes_nothing(call, error) -> None:
    with pytest.raises(ValueError, match=error):
        call()
    assert nothing_written()


@pytest.mark.processes
def test_three_groups_under_four_workers_each_consume_every_message_once(start_worker) -> None:
    n = 150
    for i in range(n):
        Message.objects.publish_to_topic("test.topic", {"n": i})
    workers = [
        start_worker(
            "django_dbqueue.Message", "--queue", g, "--concurrency", "4", "--batch-size", "5", "--burst"
        )
        for g in GROUPS
    ]
    for worker in workers:
        assert worker.wait(timeout=180) == 0, worker.output
    runs = Counter(Ledger.objects.values_list("kind", "job_id"))
    assert runs == Counter({(f"topic.{g}", i): 1 for g in GROUPS for i in range(n)})
    assert set(Message.objects.values_list("queue_state", flat=True)) == {QueueState.SUCCEEDED}
    pids = {g: set(Ledger.objects.filter(kind=f"topic.{g}").values_list("pid", flat=True)) for g in GROUPS}
    assert not pids["audit"] & pids["billing"], "a group's worker consumed another group's copies"


# -- request-reply ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "exc", "error"),
    [
        ({"timeout": 0}, ValueError, "must be positive"),
        ({"timeout": -1}, ValueError, "must be positive"),
        ({"timeout": math.nan}, TypeError, "number of seconds"),
        ({"timeout": "5"}, TypeError, "number of seconds"),
        ({"timeout": True}, TypeError, "number of seconds"),
        ({"timeout": 5, "kind": "no.handler"}, ValueError, "no handler is registered"),
        ({"timeout": 5, "kind": "bad kind"}, ValueError, "no handler is registered"),
        ({"timeout": 5, "kind": "test.topic"}, ValueError, "is a topic of groups audit, billing, shipping"),
        ({"timeout": 5, "payload": {"n": object()}}, TypeError, "JSON"),
    ],
)
def test_bad_request_input_is_refused_and_writes_nothing(kwargs, exc, error) -> None:
    kind = kwargs.pop("kind", "test.quote")
    payload = kwargs.pop("payload", {"n": 1})
    with pytest.raises(exc, match=error):
        Message.objects.request(kind, payload, **kwargs)
    assert nothing_written()


def test_a_request_inside_a_transaction_is_refused() -> None:
    with pytest.raises(TransactionManagementError, match="outside atomic"), transaction.atomic():
        Message.objects.request("test.quote", {"n": 1}, timeout=1)
    assert nothing_written()


def test_a_timeout_raises_and_leaves_nothing_behind() -> None:
    started = time.monotonic()
    with pytest.raises(ReplyTimeout, match=r"within 0\.3s"):
        Message.objects.request("test.quote", {"n": 1}, timeout=0.3)
    assert 0.3 <= time.monotonic() - started < 2
    assert nothing_written()


@pytest.mark.processes
def test_requests_get_their_own_replies_from_a_worker_process(start_worker) -> None:
    worker = start_worker("django_dbqueue.Message", "--concurrency", "2", "--poll-interval", "0.05")
    try:
        for n in range(5):
            assert Message.objects.request("test.quote", {"n": n}, timeout=30)["double"] == 2 * n
        times = _calls_from_processes(clients=4, calls=15)
        assert len(times) == 60
        assert not Reply.objects.exists(), "a read reply is deleted"
        # A handler slower than the caller's patience: the caller gives up, the late reply is dropped.
        with pytest.raises(ReplyTimeout):
            Message.objects.request("test.quote", {"n": -7, "sleep": 1.5}, timeout=0.5)
        late = Message.objects.get(payload__n=-7)
        assert wait_until(lambda: Message.objects.get(pk=late.pk).queue_state == QueueState.SUCCEEDED)
        assert not Reply.objects.exists()
        # A handler that fails for good ends the wait at once with its reason.
        started = time.monotonic()
        with pytest.raises(RequestFailed, match="quotes are closed today"):
            Message.objects.request("test.refuse", {}, timeout=30)
        assert time.monotonic() - started < 5
        assert not Reply.objects.exists()
    finally:
        worker.signal(15)
        worker.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.processes
def test_a_thousand_requests_from_eight_processes_get_their_own_replies(start_worker) -> None:
    worker = start_worker("django_dbqueue.Message", "--concurrency", "2", "--poll-interval", "0.05")
    try:
        times = _calls_from_processes(clients=8, calls=125)
        assert len(times) == 1000
        assert not Reply.objects.exists()
        # In lease mode the reply commits inside the handler and the outcome is written after
        # it returns (flushed with the claim's other rows): the last caller can read its reply
        # a moment before its message is recorded SUCCEEDED.
        succeeded = Message.objects.filter(queue_state=QueueState.SUCCEEDED)
        assert wait_until(lambda: succeeded.count() == 1000), succeeded.count()
    finally:
        worker.signal(15)
        worker.wait(timeout=30)


def test_a_reply_is_delivered_once_even_when_the_handler_runs_again() -> None:
    from django_dbqueue.messaging.reply import deliver

    message = Message.objects.publish("test.quote", {"n": 3}).message
    message.expects_reply = True
    Reply.objects.create(request_id=message.pk, expires_at=timezone.now() + timedelta(seconds=60))
    deliver(message, {"first": True})
    deliver(message, {"second": True})  # a retried handler (lease mode: at-least-once)
    assert Reply.objects.get().payload == {"first": True}


def test_purgequeue_sweeps_expired_reply_slots() -> None:
    past, future = timezone.now() - timedelta(seconds=1), timezone.now() + timedelta(hours=1)
    Reply.objects.create(request_id=1, expires_at=past)
    Reply.objects.create(request_id=2, expires_at=future)
    call_command("purgequeue", "--older-than", "1d")
    assert list(Reply.objects.values_list("request_id", flat=True)) == [2]


def _calls_from_processes(clients: int, calls: int) -> list[float]:
    from django_dbqueue.messaging.reply import close_listeners

    close_listeners()  # no thread of ours may be running across fork()
    results = run_forked(_client, [(c, calls) for c in range(clients)], timeout=300)
    errors = [r for r in results if isinstance(r, str)]
    assert not errors, errors
    return [t for r in results for t in r]


def _client(client: int, calls: int, out) -> None:
    try:
        times = []
        for i in range(calls):
            n = client * 10_000 + i
            started = time.monotonic()
            reply = Message.objects.request("test.quote", {"n": n}, timeout=30)
            times.append(time.monotonic() - started)
            assert reply["n"] == n and reply["double"] == 2 * n, (n, reply)
        out.put(times)
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        out.put(f"client {client}: {exc!r}")
    finally:
        connections.close_all()


@pytest.fixture(autouse=True)
def _close_reply_listeners():
    yield
    from django_dbqueue.messaging.reply import close_listeners

    close_listeners()  # its LISTEN session would keep the test database from being dropped


def test_the_message_admin_shows_the_group_and_the_request_flag(admin_client) -> None:
    from django.urls import reverse

    Message.objects.publish_to_topic("test.topic", {"n": 1})
    url = reverse("admin:django_dbqueue_message_changelist")
    response = admin_client.get(url, {"q": "billing"})
    assert response.status_code == 200
    assert [m.group for m in response.context["cl"].result_list] == ["billing"]
    assert "column-group" in response.content.decode() and "column-expects_reply" in response.content.decode()


# -- django.tasks: waiting on a result ---------------------------------------------------------


@pytest.mark.processes
@pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks arrived in Django 6.0")
def test_tasks_wait_returns_the_finished_result_or_times_out(start_worker) -> None:
    from django_dbqueue.models import TaskRecord
    from django_dbqueue.tasks import wait
    from tests.testapp import tasks

    result = tasks.add.enqueue(2, 3)
    with pytest.raises(ValueError, match="positive"):
        wait(result, 0)
    with pytest.raises(TransactionManagementError), transaction.atomic():
        wait(result, 1)
    with pytest.raises(ReplyTimeout, match="did not finish"):
        wait(result, 0.2)
    assert TaskRecord.objects.get().queue_state == QueueState.READY  # left as it was
    worker = start_worker("django_dbqueue.TaskRecord", "--burst")
    assert wait(result, 60).return_value == 5
    assert worker.wait(timeout=60) == 0
