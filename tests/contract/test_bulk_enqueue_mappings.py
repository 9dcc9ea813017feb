"""``bulk_enqueue()`` of mappings (queue/inserts.py): parameter lists into one multi-row INSERT
per batch, without model instances. The rows must read back as ``bulk_create`` of instances
writes them (JSON, NULLs, defaults), the queue times come from the database's clock, the
statements pass Django's cursor, and bad input raises before anything is written."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection, models, transaction
from django.db.models.signals import post_save, pre_save
from django.test.utils import CaptureQueriesContext, isolate_apps
from django.utils import timezone
from django.utils.translation import gettext_lazy

from django_dbqueue.backends import backend_for, read_now
from django_dbqueue.composition import batch
from django_dbqueue.models import Message
from django_dbqueue.queue import inserts
from django_dbqueue.states import QueueState
from tests.testapp.models import HostileJob, Job, Ledger, Ticket

pytestmark = pytest.mark.django_db(transaction=True)

#: How far a queue time may be from the database's clock read around the write (a loaded machine).
CLOSE = timedelta(seconds=5)
JSON_VALUES: list[Any] = [
    {"to": "a@example.com", "lines": [1, 2.5, None], "vip": True, "name": "Zoë"},
    [1, "two", {"three": 3}],
    "just text",
    0,
    None,
    {},
]


def test_mappings_read_back_as_bulk_create_writes_them() -> None:
    due = timezone.now().replace(microsecond=123456) - timedelta(minutes=5)

    def spec(i: int) -> dict[str, Any]:
        found: dict[str, Any] = {"subject": f"s{i % 7}", "customer": i % 3, "queue_priority": i % 4 - 1}
        if i % 2:
            found["handled"] = True
        if i % 3 == 0:
            found["queue_run_at"] = due + timedelta(seconds=i % 5)
        return found

    Ticket.objects.bulk_create([Ticket(**spec(i), queue_state=QueueState.READY) for i in range(60)])
    orm = list(Ticket.objects.order_by("pk").values())
    Ticket.objects.all().delete()
    assert Ticket.objects.bulk_enqueue([spec(i) for i in range(60)], batch_size=25) == 60
    ours = list(Ticket.objects.order_by("pk").values())
    volatile = ("id", "queue_run_at", "queue_enqueued_at")
    assert [{k: v for k, v in row.items() if k not in volatile} for row in ours] == [
        {k: v for k, v in row.items() if k not in volatile} for row in orm
    ]
    given = [row["queue_run_at"] for i, row in enumerate(ours) if i % 3 == 0]
    assert given == [due + timedelta(seconds=i % 5) for i in range(60) if i % 3 == 0]


def test_json_payloads_and_nulls_read_back_as_given() -> None:
    rows = [{"action": "ours", "data": value} for value in JSON_VALUES]
    assert HostileJob.objects.bulk_enqueue(rows) == len(rows)
    HostileJob.objects.bulk_create([HostileJob(action="orm", data=value) for value in JSON_VALUES])
    ours = list(HostileJob.objects.filter(action="ours").order_by("pk").values_list("data", flat=True))
    orm = list(HostileJob.objects.filter(action="orm").order_by("pk").values_list("data", flat=True))
    assert ours == orm == JSON_VALUES
    assert HostileJob.objects.filter(data__isnull=True).count() == 2  # SQL NULL, as bulk_create

    messages = [{"kind": "test.mail", "payload": value} for value in JSON_VALUES]
    assert Message.objects.bulk_enqueue(messages) == len(messages)
    stored = Message.objects.order_by("pk").values_list("payload", "key", "queue", "group", "queue_state")
    assert list(stored) == [(value, None, "default", "", QueueState.READY) for value in JSON_VALUES]


def test_queue_times_come_from_the_database_clock(monkeypatch) -> None:
    real_now = timezone.now
    monkeypatch.setattr(timezone, "now", lambda: real_now() + timedelta(hours=1))  # a host's wrong clock
    before = read_now("default")
    assert Job.objects.bulk_enqueue([{"name": str(i)} for i in range(5)]) == 5
    after = read_now("default")
    for run_at, enqueued_at in Job.objects.values_list("queue_run_at", "queue_enqueued_at"):
        assert before - CLOSE <= run_at <= after + CLOSE
        assert before - CLOSE <= enqueued_at <= after + CLOSE
    assert Job.objects.ready().count() == 5  # due now on the database's clock, not in an hour


def test_rows_giving_a_time_and_rows_not_share_one_statement() -> None:
    later = read_now("default") + timedelta(days=1)
    rows: list[dict[str, Any]] = [{"name": "now"}, {"name": "later", "queue_run_at": later}]
    with CaptureQueriesContext(connection) as queries:
        assert Job.objects.bulk_enqueue(rows) == 2
    assert [q["sql"][:6].upper() for q in queries.captured_queries].count("INSERT") == 1
    assert Job.objects.get(name="later").queue_run_at == later
    assert list(Job.objects.ready().values_list("name", flat=True)) == ["now"]


def test_one_statement_per_batch_through_djangos_cursor() -> None:
    seen: list[str] = []

    def wrapper(execute, sql, params, many, context):  # an execute wrapper sees every statement
        seen.append(sql)
        return execute(sql, params, many, context)

    rows = [{"name": str(i)} for i in range(2500)]
    size = min(1000, connection.ops.bulk_batch_size(list(Job._meta.concrete_fields), rows[:1000]))
    with connection.execute_wrapper(wrapper), CaptureQueriesContext(connection) as queries:
        assert Job.objects.bulk_enqueue(rows, batch_size=1000) == 2500
    inserts_seen = [sql for sql in seen if sql.lstrip()[:6].upper() == "INSERT"]
    # One INSERT per batch, never one per row: 1,000 rows each where the database takes that many
    # parameters; where it takes fewer (SQLite built with 999 variables), batches sized by the
    # columns actually sent (those no row gives are left out), so at most as many as with every
    # column of the model.
    assert -(-2500 // 1000) <= len(inserts_seen) <= -(-2500 // size)
    assert len([q for q in queries.captured_queries if q["sql"][:6].upper() == "INSERT"]) == len(inserts_seen)
    assert sorted(int(n) for n in Job.objects.values_list("name", flat=True)) == list(range(2500))


def test_defaults_fixed_values_and_the_open_batch() -> None:
    with batch(description="import") as opened:
        # A given state is overridden (bulk_enqueue inserts READY rows), as with instances.
        assert Job.objects.bulk_enqueue([{"name": "a", "queue_state": QueueState.IDLE}, {"name": "b"}]) == 2
    rows = Job.objects.order_by("name").values_list(
        "name", "action", "fail_times", "queue_state", "queue_batch"
    )
    assert list(rows) == [("a", "ok", 0, "ready", opened.pk), ("b", "ok", 0, "ready", opened.pk)]
    assert opened.total == 2


def test_a_callable_default_is_called_per_row() -> None:
    plan = inserts.plan_for(Ledger, "default")
    assert plan is not None
    layout, params = plan.rows([{"kind": "k", "job_id": n, "attempt": 1} for n in (1, 2)], {}, {})
    assert plan.insert(layout, params, 100) == 2
    assert list(Ledger.objects.values_list("pid", flat=True).distinct()) == [
        Ledger._meta.get_field("pid").default()
    ]


def test_no_signals_like_bulk_create_and_instances_on_request() -> None:
    sent: list[str] = []

    def receiver(sender, **kwargs):
        sent.append("pre" if kwargs.get("signal") is pre_save else "post")

    pre_save.connect(receiver, sender=Job)
    post_save.connect(receiver, sender=Job)
    try:
        assert Job.objects.bulk_enqueue([{"name": "fast"}]) == 1
        assert Job.objects.bulk_enqueue([{"name": "built"}], build_instances=True) == 1
    finally:
        pre_save.disconnect(receiver, sender=Job)
        post_save.disconnect(receiver, sender=Job)
    assert sent == []  # bulk_create sends none either
    assert set(Job.objects.values_list("name", "queue_state")) == {("fast", "ready"), ("built", "ready")}


@isolate_apps("tests.testapp")
def test_a_field_computing_its_own_value_needs_an_instance() -> None:
    class Slug(models.CharField):
        def pre_save(self, model_instance: Any, add: bool) -> Any:
            return "computed"

    class Article(models.Model):
        slug = Slug(max_length=20)
        stamped = models.DateTimeField(auto_now_add=True)

        class Meta:
            app_label = "testapp"

    class Stamped(models.Model):
        stamped = models.DateTimeField(auto_now_add=True)

        class Meta:
            app_label = "testapp"

    assert inserts.plan_for(Article, "default") is None  # bulk_enqueue builds instances then
    plan = inserts.plan_for(Stamped, "default")
    assert plan is not None  # auto_now_add: one pre_save() value per batch
    layout, params = plan.rows(
        [{}, {"stamped": datetime(2000, 1, 1, tzinfo=timezone.get_current_timezone())}], {}, {}
    )
    # The given value is overridden, as Django does: one value for every row (shared by the
    # rows where the backend sends it as one named parameter).
    if backend_for("default").shares_named_parameters:
        assert params == [[], []]
        stamped = list(layout.shared.values())
    else:
        stamped = [row[0] for row in params]
    assert len(set(stamped)) == 1 and "2000" not in str(stamped[0])


def test_bad_input_names_the_row_and_writes_nothing() -> None:
    good = [{"name": str(i)} for i in range(5)]
    with pytest.raises(ValueError, match=r"row 5, field 'fail_times'"):
        Job.objects.bulk_enqueue([*good, {"name": "bad", "fail_times": "many"}])
    # Named by row and field; on PostgreSQL psycopg dumps JSON as it sends it: by batch.
    with pytest.raises(TypeError, match=r"row 2, field 'data'|rows 0-2: .*JSON serializable"):
        HostileJob.objects.bulk_enqueue([{"data": {}}, {"data": []}, {"data": {"x": object()}}])
    with pytest.raises(ValueError, match=r"row 1: priority"):
        Job.objects.bulk_enqueue([{"name": "a"}, {"queue_priority": 2**40}])
    with pytest.raises(TypeError, match="unexpected keyword"):
        Job.objects.bulk_enqueue([*good, {"no_such_field": 1}])
    with transaction.atomic():
        with pytest.raises(ValueError):
            Job.objects.bulk_enqueue([*good, {"fail_times": "many"}])
        assert not connection.needs_rollback  # the caller's transaction stays usable
        assert Job.objects.bulk_enqueue(good) == 5
    assert Job.objects.count() == 5 and not HostileJob.objects.exists()


def test_a_column_whose_database_default_is_its_value_is_left_to_the_database() -> None:
    # queue_dependants: default=False and db_default=False. Sending it was one parameter more
    # per row for the driver to quote; the database stores the same False.
    with CaptureQueriesContext(connection) as queries:
        assert Job.objects.bulk_enqueue([{"name": "left"}, {"name": "given", "queue_dependants": True}]) == 2
        assert Job.objects.bulk_enqueue([{"name": "none"}]) == 1
    inserts_sent = [q["sql"] for q in queries.captured_queries if q["sql"][:6].upper() == "INSERT"]
    assert len(inserts_sent) == 2
    assert "queue_dependants" in inserts_sent[0]  # a row gives it: the column is sent for all
    assert "queue_dependants" not in inserts_sent[1]
    assert dict(Job.objects.values_list("name", "queue_dependants")) == {
        "left": False,
        "given": True,
        "none": False,
    }


def test_a_column_without_a_database_default_is_still_sent() -> None:
    plan = inserts.plan_for(Message, "default")
    assert plan is not None
    filled = {column.field.name for column in plan.columns if column.database_fills}
    # Only db_default columns; expects_reply (default=False, no db_default) is sent as before.
    assert filled == {"queue_dependants"}


def test_text_values_pass_as_they_are_and_others_are_converted_by_the_field() -> None:
    class Tagged(str):
        pass

    rows: list[dict[str, Any]] = [
        {"subject": "plain"},
        {"subject": 42},  # CharField.to_python makes it "42", as save() would
        {"subject": gettext_lazy("lazy")},  # a lazy string is resolved by get_prep_value
        {"subject": Tagged("tagged")},  # a str subclass takes the field's own path
    ]
    assert Ticket.objects.bulk_enqueue(rows) == 4
    assert list(Ticket.objects.order_by("pk").values_list("subject", flat=True)) == [
        "plain",
        "42",
        "lazy",
        "tagged",
    ]


def test_a_value_every_row_shares_is_one_parameter_where_the_driver_quotes_it_once() -> None:
    sent: list[Any] = []

    def wrapper(execute, sql, params, many, context):
        if sql.lstrip()[:6].upper() == "INSERT":
            sent.append(params)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        assert Job.objects.bulk_enqueue([{"name": f"n{i}"} for i in range(50)]) == 50
    rows = Job.objects.values_list("name", "action", "queue_state")
    assert sorted(rows) == sorted((f"n{i}", "ok", QueueState.READY) for i in range(50))
    (params,) = sent
    if backend_for("default").shares_named_parameters:
        values = list(params.values())
        # The state, the action's default, ...: each once per statement, not once per row.
        assert values.count(QueueState.READY) == 1
        assert len(values) < 2 * 50
    else:  # positional parameters: one value per row
        values = list(params)
        assert values.count(QueueState.READY) == 50
    assert sorted(v for v in values if isinstance(v, str) and v.startswith("n")) == sorted(
        f"n{i}" for i in range(50)
    )


def test_json_documents_are_sent_as_the_field_would_send_them() -> None:
    plan = inserts.plan_for(HostileJob, "default")
    assert plan is not None
    documents: list[Any] = [{"b": 1, "a": "Zoë", "n": [1.5, None, True]}, [1, {"x": "y"}], "text", 3]
    layout, params = plan.rows([{"data": document} for document in documents], {}, {})
    index = layout.index[plan.positions["data"]]
    data = HostileJob._meta.get_field("data")
    expected = [data.get_db_prep_save(document, connection) for document in documents]
    if all(isinstance(value, str) for value in expected):  # text: the same bytes stored
        assert [row[index] for row in params] == expected
    else:  # a wrapper the driver dumps (psycopg's Jsonb): the field's own, of the same value
        assert [type(row[index]) for row in params] == [type(value) for value in expected]
        assert [row[index].obj for row in params] == documents
