"""Payloads a database stores but a worker cannot decode, and payloads ``publish()`` refuses
(issue #21, items 2 and 8). Real databases, in-process workers."""

from __future__ import annotations

import math

import django
import pytest
from django.db import connection, transaction

from django_dbqueue.messaging.payloads import MAX_DEPTH
from django_dbqueue.models import Message
from django_dbqueue.states import QueueState
from django_dbqueue.worker import Worker
from tests.testapp.models import HostileJob

pytestmark = pytest.mark.django_db(transaction=True)

#: Deeper than Python's json decoder can go (its C recursion limit, 10,000 on Python 3.13), not
#: as deep as PostgreSQL's stack allows it to store;
#: MariaDB and SQLite refuse it (their JSON check constraints), and the test is skipped there.
DEEP = "[" * 12_000 + "]" * 12_000


def _store_raw(model: type, column: str, pk: int, text: str) -> None:
    """Write JSON text past the ORM, as another tool (or an older release) would."""
    table = connection.ops.quote_name(model._meta.db_table)
    cast = "::jsonb" if connection.vendor == "postgresql" else ""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET {connection.ops.quote_name(column)} = %s{cast} WHERE id = %s", [text, pk]
        )


@pytest.mark.parametrize(
    "model, column", [(HostileJob, "data"), (Message, "payload")], ids=["jsonfield", "message"]
)
def test_a_row_whose_json_cannot_be_decoded_fails_alone_and_the_batch_runs(model, column) -> None:
    if model is Message:
        rows = [Message.objects.publish("test.echo", {"n": i}).message for i in range(5)]
    else:
        rows = [HostileJob.objects.create(action="ok", data={"n": i}) for i in range(5)]
    poison = rows[2]
    try:
        _store_raw(model, column, poison.pk, DEEP)
    except Exception as exc:  # noqa: BLE001 - a database that refuses to store it is fine too
        pytest.skip(f"{connection.vendor} refuses a JSON value this deep: {exc}")
    stats = Worker(models=[model], burst=True, handle_signals=False, batch_size=5).run()
    states = dict(model.objects.values_list("pk", "queue_state"))
    assert states.pop(poison.pk) == QueueState.FAILED
    assert set(states.values()) == {QueueState.SUCCEEDED}
    assert "could not be loaded" in model.objects.values_list("queue_last_error", flat=True).get(pk=poison.pk)
    assert stats.succeeded == 4


@pytest.mark.parametrize(
    "payload, error, words",
    [
        ({"n": math.nan}, ValueError, "NaN"),
        ({"n": [1.0, math.inf]}, ValueError, "NaN or infinity"),
        ({"text": "a\x00b"}, ValueError, "NUL"),
        ({1: "x"}, TypeError, "JSON keys are strings"),
        ({"when": object()}, TypeError, "not JSON-serialisable"),
    ],
)
def test_publish_refuses_what_no_database_or_worker_could_take(payload, error, words) -> None:
    with transaction.atomic():
        with pytest.raises(error, match=words):
            Message.objects.publish("test.echo", payload)
        # The caller's transaction is still usable: the refusal came before any statement.
        Message.objects.publish("test.echo", {"fine": True})
    assert list(Message.objects.values_list("payload", flat=True)) == [{"fine": True}]


def test_publish_refuses_a_payload_nested_too_deeply_and_takes_one_at_the_limit() -> None:
    deep: object = "leaf"
    for _ in range(MAX_DEPTH + 1):
        deep = [deep]
    with pytest.raises(ValueError, match="nested deeper"):
        Message.objects.publish("test.echo", deep)
    with pytest.raises(ValueError, match="nested deeper"):
        Message.objects.publish_many([{"kind": "test.echo", "payload": deep}])
    at_limit: object = "leaf"
    for _ in range(MAX_DEPTH):
        at_limit = [at_limit]
    assert Message.objects.publish("test.echo", at_limit).created


#: Text no database stores as given (issue #31, item 9): PostgreSQL raised DataError for each.
NUL_KEY = "order:\x00:1"
LONE_SURROGATE = "caf\ud800"


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: Message.objects.publish("test.echo", {}, key=NUL_KEY), "key .* NUL"),
        (lambda: Message.objects.publish("test.echo", {}, key=LONE_SURROGATE), "key .* surrogate"),
        (lambda: Message.objects.publish("test.echo", {"name": LONE_SURROGATE}), "string .* surrogate"),
        (
            lambda: Message.objects.publish("test.echo", {LONE_SURROGATE: 1}),
            "key in the payload .* surrogate",
        ),
        (lambda: Message.objects.publish("test.echo", {"a\x00": 1}), "key in the payload .* NUL"),
        (lambda: Message.objects.publish("test.echo", [{"deep": ["x", "\udfff"]}]), "surrogate"),
        (lambda: Message.objects.publish("test.echo", "\ud83d"), "surrogate"),
        (lambda: Message.objects.publish_to_topic("test.topic", {}, key=NUL_KEY), "NUL"),
        (lambda: Message.objects.publish_to_topic("test.topic", {"t": LONE_SURROGATE}), "surrogate"),
        (
            lambda: Message.objects.publish_many(
                [{"kind": "test.echo", "key": "fine"}, {"kind": "test.echo", "key": NUL_KEY}]
            ),
            "NUL",
        ),
    ],
    ids=[
        "nul-key",
        "surrogate-key",
        "surrogate-value",
        "surrogate-dict-key",
        "nul-dict-key",
        "surrogate-nested",
        "surrogate-top-level",
        "topic-nul-key",
        "topic-surrogate",
        "publish-many-nul-key",
    ],
)
def test_publish_refuses_text_no_database_stores_and_inserts_nothing(call, words) -> None:
    with transaction.atomic():
        with pytest.raises(ValueError, match=words):
            call()
        # Refused before the INSERT: the caller's transaction is still usable.
        Message.objects.publish("test.echo", {"fine": True})
    assert list(Message.objects.values_list("payload", flat=True)) == [{"fine": True}]


def test_text_databases_store_is_taken_as_given() -> None:
    # A backslash before "u0000" is not a NUL character, and a character outside the BMP
    # (a valid surrogate pair in JSON's escapes) is not a lone surrogate.
    payload = {"path": "C:\\u0000\\x", "emoji": "\U0001f600", "é": "ü"}
    message = Message.objects.publish("test.echo", payload, key="\U0001f600").message
    message.refresh_from_db()
    assert message.payload == payload and message.key == "\U0001f600"


@pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks arrived in Django 6.0")
@pytest.mark.parametrize(
    "args, kwargs", [(("a\x00b", 1), {}), ((1, 2), {"b": LONE_SURROGATE}), (([{"k": "\ud800"}], 1), {})]
)
def test_a_tasks_arguments_are_refused_like_a_payload(args, kwargs) -> None:
    from django_dbqueue.models import TaskRecord
    from tests.testapp import tasks

    with pytest.raises(ValueError, match=r"the arguments of task .*(NUL|surrogate)"):
        tasks.add.enqueue(*args, **kwargs)
    assert not TaskRecord.objects.exists()
