"""The INSERT of new queue rows (django_dbqueue.insert, .bulk): what Django would write.

``save()`` of a new row and ``bulk_enqueue()`` write their own INSERT; every row they write
must read back, column for column, as the ORM's own ``Model.save()`` / ``bulk_create()``
writes it. The models below cover most field types Django ships, created for these tests
only (their tables live for one test).
"""

from __future__ import annotations

import datetime as dt
import uuid
import zoneinfo
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from django.db import IntegrityError, connection, models, transaction
from django.db.models.signals import post_save, pre_save
from django.test.utils import CaptureQueriesContext, isolate_apps
from django.utils import timezone
from django.utils.connection import ConnectionDoesNotExist

from django_dbqueue.bulk import Batch
from django_dbqueue.insert import insert_plan, sql_literal
from django_dbqueue.models import QueueMixin
from django_dbqueue.query import DbNow
from django_dbqueue.states import QueueState
from tests.testapp.models import AtomicNoop, Job, Noop, Ticket

pytestmark = pytest.mark.django_db(transaction=True)

#: Text that needs escaping or could be taken for a placeholder.
HOSTILE = 'it\'s a \\ "test" %s %% ; -- ünïcødé 🚀 \x1a'


class OwnCharField(models.CharField):
    """A field of the user's own: its values are prepared every time, never kept."""


class RawBytesField(models.Field):
    """A field of the user's own whose prepared value is bytes (its MySQL literal is not text)."""

    def db_type(self, connection: Any) -> str:
        return {"mysql": "longblob", "postgresql": "bytea"}.get(connection.vendor, "blob")

    def get_db_prep_value(self, value: Any, connection: Any, prepared: bool = False) -> Any:
        return None if value is None else bytes(value)

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        return None if value is None else bytes(value)


with isolate_apps("tests.testapp"):

    class Customer(models.Model):
        name = models.CharField(max_length=50)

        class Meta:
            app_label = "testapp"

    class Queued(QueueMixin):
        class Meta(QueueMixin.Meta):
            abstract = True
            app_label = "testapp"

    class Rich(Queued):
        customer = models.ForeignKey(Customer, null=True, blank=True, on_delete=models.CASCADE)
        title = models.CharField(max_length=100, default="untitled")
        body = models.TextField(blank=True, default="")
        own = OwnCharField(max_length=100, blank=True, default="")
        count = models.IntegerField(default=0)
        big = models.BigIntegerField(null=True)
        small = models.PositiveSmallIntegerField(default=1)
        ratio = models.FloatField(default=0.5)
        amount = models.DecimalField(max_digits=12, decimal_places=3, default=Decimal("1.250"))
        flag = models.BooleanField(default=False)
        maybe = models.BooleanField(null=True)
        day = models.DateField(null=True)
        at = models.TimeField(null=True)
        took = models.DurationField(null=True)
        ref = models.UUIDField(default=uuid.uuid4, unique=True)
        data = models.JSONField(null=True)
        created = models.DateTimeField(auto_now_add=True)

    class Blobs(Queued):
        raw = RawBytesField(null=True)
        binary = models.BinaryField(null=True)  # has its own placeholder on MySQL: Django's path

    class RawBlobs(Queued):
        raw = RawBytesField(null=True)

    class OverridesSaveTable(Queued):
        """Someone else's save step: the new-row path must leave it to Django."""

        name = models.CharField(max_length=20, default="")

        def _save_table(self, *args: Any, **kwargs: Any) -> Any:
            self.name = "via _save_table"
            return super()._save_table(*args, **kwargs)

    class WithDbDefault(Queued):
        name = models.CharField(max_length=20, db_default="from the database")

    class Parent(Queued):
        name = models.CharField(max_length=20, default="")

    class Child(Parent):
        extra = models.IntegerField(default=0)

        class Meta:  # the queue columns and their index are the parent's
            app_label = "testapp"


ISOLATED = (Customer, Rich, Blobs, RawBlobs, OverridesSaveTable, WithDbDefault, Parent, Child)


@pytest.fixture
def tables() -> Iterator[None]:
    created = []
    try:
        with connection.schema_editor() as editor:
            for model in ISOLATED:
                if model._meta.db_table in connection.introspection.table_names():
                    editor.delete_model(model)  # left by an interrupted run
                editor.create_model(model)
                created.append(model)
        yield
    finally:
        with connection.schema_editor() as editor:
            for model in reversed(created):
                editor.delete_model(model)


def stored(model: type[models.Model], pk: Any) -> tuple:
    """A row as the database returns it, every column but the key, in raw SQL."""
    qn = connection.ops.quote_name
    meta = model._meta
    columns = [f.column for f in meta.local_concrete_fields if not f.primary_key]
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {', '.join(qn(c) for c in columns)} FROM {qn(meta.db_table)} "
            f"WHERE {qn(meta.pk.column)} = %s",
            [pk],
        )
        row = cursor.fetchone()
    assert row is not None, f"no {meta.label} row {pk}"
    return tuple(bytes(v) if isinstance(v, memoryview) else v for v in row)


def rich_values(customer: Customer, **extra: Any) -> dict[str, Any]:
    values = {
        "customer": customer,
        "title": HOSTILE[:100],
        "body": HOSTILE * 3,
        "own": "own " + HOSTILE[:50],
        "count": -7,
        "big": 2**62,
        "small": 3,
        "ratio": 0.1,
        "amount": Decimal("12345.678"),
        "flag": True,
        "maybe": None,
        "day": dt.date(2026, 2, 28),
        "at": dt.time(23, 59, 58, 123456),
        "took": dt.timedelta(days=2, microseconds=5),
        "data": {"text": HOSTILE, "list": [1, 2.5, None, True]},
        "queue_priority": 5,
        "queue_run_at": timezone.now().replace(microsecond=654321) - dt.timedelta(minutes=1),
    }
    values.update(extra)
    return values


def without(row: tuple, model: type[models.Model], *names: str) -> tuple:
    """``row`` without the columns of ``names`` (values made per row: times, uuids)."""
    fields = [f for f in model._meta.local_concrete_fields if not f.primary_key]
    return tuple(value for f, value in zip(fields, row, strict=True) if f.name not in names)


# -- save() ------------------------------------------------------------------------------


def test_save_writes_every_column_as_djangos_save_does(tables: None) -> None:
    customer = Customer.objects.create(name="c")
    ref = uuid.uuid4()
    ours = Rich(**rich_values(customer, ref=ref))
    djangos = Rich(**rich_values(customer, ref=uuid.uuid4()))
    djangos.queue_run_at = ours.queue_run_at
    djangos.queue_enqueued_at = ours.queue_enqueued_at
    assert insert_plan(Rich, connection) is not None
    ours.save()
    models.Model.save(djangos)  # Django's own save machinery, end to end
    assert ours.pk is not None and djangos.pk == ours.pk + 1
    mine, theirs = stored(Rich, ours.pk), stored(Rich, djangos.pk)
    assert without(mine, Rich, "ref", "created") == without(theirs, Rich, "ref", "created")
    assert Rich.objects.get(pk=ours.pk).ref == ref
    again = Rich.objects.get(pk=ours.pk)
    assert again.created == ours.created and again.title == HOSTILE[:100]


def test_save_of_defaults_writes_what_djangos_save_writes(tables: None) -> None:
    ours, djangos = Rich(), Rich()
    for row in (ours, djangos):
        row.queue_run_at = row.queue_enqueued_at = timezone.now().replace(microsecond=1)
    ours.save()
    models.Model.save(djangos)
    assert without(stored(Rich, ours.pk), Rich, "ref", "created") == without(
        stored(Rich, djangos.pk), Rich, "ref", "created"
    )
    assert Rich.objects.get(pk=ours.pk).queue_state == QueueState.READY


def test_save_sets_the_key_and_state_and_sends_both_signals() -> None:
    heard: list[tuple] = []

    def before(sender: Any, instance: Any, **kwargs: Any) -> None:
        heard.append(("pre", sender, instance.pk, kwargs["raw"], kwargs["using"], kwargs["update_fields"]))

    def after(sender: Any, instance: Any, **kwargs: Any) -> None:
        heard.append(
            ("post", sender, instance.pk, kwargs["created"], kwargs["using"], instance._state.adding)
        )

    pre_save.connect(before, dispatch_uid="test_insert.before")
    post_save.connect(after, dispatch_uid="test_insert.after")
    try:
        ticket = Ticket(subject="signals")
        ticket.save()
        proxied = AtomicNoop(payload="proxy")
        proxied.save()
    finally:
        pre_save.disconnect(dispatch_uid="test_insert.before")
        post_save.disconnect(dispatch_uid="test_insert.after")
    assert isinstance(ticket.pk, int) and Ticket.objects.get(pk=ticket.pk).subject == "signals"
    assert ticket._state.db == "default" and not ticket._state.adding
    assert heard == [
        ("pre", Ticket, None, False, "default", None),
        ("post", Ticket, ticket.pk, True, "default", False),
        ("pre", AtomicNoop, None, False, "default", None),  # the proxy is the sender
        ("post", AtomicNoop, proxied.pk, True, "default", False),
    ]
    assert Noop.objects.get(pk=proxied.pk).payload == "proxy"


def test_save_of_a_saved_row_updates_it_and_writes_no_queue_columns() -> None:
    ticket = Ticket(subject="one")
    ticket.save()
    first = ticket.pk
    Ticket.objects.filter(pk=first).update(queue_priority=7)
    ticket.subject = "two"
    ticket.save()
    row = Ticket.objects.get(pk=first)
    assert (row.subject, row.queue_priority, Ticket.objects.count()) == ("two", 7, 1)


class Router:
    def __init__(self, alias: str) -> None:
        self.alias = alias
        self.asked: list[tuple[type, Any]] = []

    def db_for_write(self, model: type, **hints: Any) -> str:
        self.asked.append((model, hints.get("instance")))
        return self.alias


def test_save_asks_the_router_and_writes_where_it_says(settings: Any) -> None:
    router = Router("default")
    settings.DATABASE_ROUTERS = [router]
    job = Job(name="routed")
    job.save()
    assert router.asked == [(Job, job)] and job._state.db == "default"
    elsewhere = Router("nowhere")
    settings.DATABASE_ROUTERS = [elsewhere]
    with pytest.raises(ConnectionDoesNotExist):
        Job(name="lost").save()
    assert elsewhere.asked and not Job.objects.filter(name="lost").exists()
    job = Job(name="explicit")
    job.save(using="default")  # an explicit database wins over the router
    assert job._state.db == "default" and Job.objects.filter(name="explicit").exists()


def test_save_in_a_transaction_rolls_back_with_it() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        Job(name="rolled back").save()
        raise RuntimeError
    assert not Job.objects.filter(name="rolled back").exists()


def test_a_failed_insert_marks_the_transaction_for_rollback_as_django_does() -> None:
    Job(name="first").save()
    taken = Job.objects.get(name="first").pk
    with transaction.atomic():
        with pytest.raises(IntegrityError):
            Job(pk=taken, name="again").save(force_insert=True)  # a key already set: Django's path
        assert transaction.get_rollback()
    with pytest.raises(IntegrityError), transaction.atomic():
        # The fast path: a NOT NULL column given NULL fails in the database.
        Job(name=None).save()
    assert list(Job.objects.values_list("name", flat=True)) == ["first"]


def test_a_new_row_leaves_its_null_queue_columns_out_of_the_insert() -> None:
    held = timezone.now().replace(microsecond=7)
    with CaptureQueriesContext(connection) as queries:
        plain = Job(name="plain")
        plain.save()
        leased = Job(name="leased", queue_locked_by="someone", queue_token=42, queue_locked_until=held)
        leased.save()
    inserts = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("INSERT")]
    assert len(inserts) == 2
    for name in ("queue_token", "queue_locked_by", "queue_locked_until"):
        assert name not in inserts[0] and name in inserts[1]
    for name in ("queue_finished_at", "queue_last_attempt_at"):  # NULL in both rows
        assert name not in inserts[0] and name not in inserts[1]
    assert all("queue_run_at" in sql and "queue_state" in sql for sql in inserts)
    assert Job.objects.filter(pk=plain.pk, queue_token__isnull=True, queue_locked_by__isnull=True).exists()
    again = Job.objects.get(pk=leased.pk)
    assert (again.queue_locked_by, again.queue_token, again.queue_locked_until) == ("someone", 42, held)


def test_bulk_enqueue_names_a_null_queue_column_only_when_some_row_fills_it() -> None:
    with CaptureQueriesContext(connection) as queries:
        Job.objects.bulk_enqueue([{"name": "a"}, {"name": "b"}])
        Job.objects.bulk_enqueue([{"name": "c"}, {"name": "d", "queue_locked_by": "w"}, Job(name="e")])
        Job.objects.bulk_enqueue([Job(name="f", queue_token=9), {"name": "g"}])
    inserts = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("INSERT")]
    assert len(inserts) == 3
    assert "queue_locked_by" not in inserts[0] and "queue_token" not in inserts[0]
    assert "queue_locked_by" in inserts[1] and "queue_token" not in inserts[1]
    assert "queue_token" in inserts[2] and "queue_locked_by" not in inserts[2]
    stored_rows = dict(Job.objects.values_list("name", "queue_locked_by"))
    assert stored_rows == {"a": None, "b": None, "c": None, "d": "w", "e": None, "f": None, "g": None}
    assert dict(Job.objects.filter(name__in="fg").values_list("name", "queue_token")) == {"f": 9, "g": None}


def test_save_sends_its_insert_past_djangos_cursor_only_when_nothing_would_see_it() -> None:
    seen: list[str] = []

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if sql.startswith("INSERT"):  # not a new connection's set-up
            seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        Job(name="watched").save()
    assert len(seen) == 1
    direct_row = Job(name="direct")
    direct_row.save()
    assert len(seen) == 1  # the wrapper is gone: nothing else saw the second INSERT
    if connection.vendor == "mysql":  # sent on the driver's connection, its key read there
        assert connection.connection.insert_id() == direct_row.pk
    assert list(Job.objects.order_by("pk").values_list("name", flat=True)) == ["watched", "direct"]


@pytest.mark.parametrize("microsecond", [0, 1, 999999])
def test_a_utc_time_has_the_literal_djangos_preparation_gives_it(microsecond: int) -> None:
    plan = insert_plan(Job, connection)
    assert plan is not None
    connection.ensure_connection()
    index = [f.name for f in plan.fields].index("queue_run_at")
    field = plan.fields[index]
    when = dt.datetime(2026, 11, 23, 5, 6, 7, microsecond, tzinfo=dt.UTC)
    berlin = when.astimezone(zoneinfo.ZoneInfo("Europe/Berlin"))  # not UTC: Django's preparation
    for value in (when, berlin):
        prepared = field.get_db_prep_save(value, connection)
        expected = sql_literal(connection, prepared) if plan.literal else prepared
        assert plan.cell(index, value, connection) == expected
    row = Job(name="times", queue_run_at=berlin)
    row.save()
    assert Job.objects.get(pk=row.pk).queue_run_at == when


# -- save(): what takes Django's path ---------------------------------------------------


def test_a_key_set_by_the_caller_takes_djangos_update_or_insert() -> None:
    job = Job(pk=424242, name="chosen key")
    job.save()
    assert Job.objects.get(pk=424242).name == "chosen key"
    job2 = Job(pk=424242, name="same key")
    job2.save()  # Django's rule: an UPDATE of the row with that key
    assert Job.objects.get(pk=424242).name == "same key" and Job.objects.count() == 1


def test_an_expression_as_a_value_is_compiled_by_django() -> None:
    job = Job(name="expr", queue_run_at=DbNow())
    job.save()
    assert job.pk is not None
    row = Job.objects.get(pk=job.pk)
    assert abs(row.queue_run_at - timezone.now()) < dt.timedelta(minutes=5)


def test_models_the_plan_does_not_cover_save_through_django(tables: None) -> None:
    assert insert_plan(WithDbDefault, connection) is None
    assert insert_plan(Child, connection) is None  # multi-table inheritance
    assert insert_plan(Parent, connection) is not None

    row = WithDbDefault()
    row.save()
    assert WithDbDefault.objects.get(pk=row.pk).name == "from the database"
    child = Child(name="child", extra=3)
    child.save()
    assert Child.objects.get(pk=child.pk).extra == 3 and Parent.objects.get(pk=child.pk).name == "child"
    overridden = OverridesSaveTable()
    overridden.save()
    assert OverridesSaveTable.objects.get(pk=overridden.pk).name == "via _save_table"


def test_bytes_go_as_parameters(tables: None) -> None:
    assert insert_plan(Blobs, connection) is None  # BinaryField brings its own placeholder
    assert insert_plan(RawBlobs, connection) is not None
    data = b"\x00\x01'\\\xff%s"
    for model, values in ((Blobs, {"raw": data, "binary": data}), (RawBlobs, {"raw": data})):
        ours, djangos = model(**values), model(**values)
        djangos.queue_run_at = ours.queue_run_at
        djangos.queue_enqueued_at = ours.queue_enqueued_at
        ours.save()
        models.Model.save(djangos)
        assert stored(model, ours.pk) == stored(model, djangos.pk)
        assert model.objects.get(pk=ours.pk).raw == data
    when = timezone.now()
    rows = [
        {"raw": data, "queue_run_at": when, "queue_enqueued_at": when},
        {"queue_run_at": when, "queue_enqueued_at": when},
    ]
    RawBlobs.objects.bulk_create([RawBlobs(**row) for row in rows])
    assert RawBlobs.objects.bulk_enqueue(rows) == 2
    pks = list(RawBlobs.objects.order_by("pk").values_list("pk", flat=True))[-4:]
    assert [stored(RawBlobs, pk) for pk in pks[:2]] == [stored(RawBlobs, pk) for pk in pks[2:]]


def test_create_goes_the_same_way_and_sends_one_insert() -> None:
    with CaptureQueriesContext(connection) as queries:
        ticket = Ticket.objects.create(subject="created")
    inserts = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("INSERT")]
    assert len(inserts) == 1 and ticket.pk is not None
    assert Ticket.objects.get(pk=ticket.pk).subject == "created"


# -- bulk_enqueue() ---------------------------------------------------------------------


def test_bulk_enqueue_of_instances_writes_what_bulk_create_writes(tables: None) -> None:
    customer = Customer.objects.create(name="c")
    when = timezone.now().replace(microsecond=5)

    def specs() -> list[Rich]:
        rows = []
        for i in range(30):
            row = Rich(**rich_values(customer, count=i % 4, title=f"t{i % 3}", queue_run_at=when))
            row.queue_enqueued_at = when
            rows.append(row)
        return rows

    Rich.objects.bulk_create(specs())
    assert Rich.objects.bulk_enqueue(specs(), batch_size=7) == 30
    rows = [
        without(stored(Rich, pk), Rich, "ref", "created")
        for pk in Rich.objects.order_by("pk").values_list("pk", flat=True)
    ]
    assert rows[:30] == rows[30:] and len(rows) == 60


def test_bulk_enqueue_of_mappings_writes_what_bulk_create_writes(tables: None) -> None:
    customer = Customer.objects.create(name="c")
    when = timezone.now().replace(microsecond=5)
    mappings: list[dict[str, Any]] = [
        {},
        {},
        {"title": HOSTILE[:90], "count": 3, "queue_priority": 2},
        {"customer": customer, "data": {"k": [HOSTILE]}},
        {"customer_id": customer.pk, "amount": Decimal("0.001"), "day": dt.date(2020, 1, 2)},
        {"ratio": 1e-7, "maybe": True, "at": dt.time(1, 2, 3), "took": dt.timedelta(seconds=90)},
        {"own": "mine", "flag": True, "big": -(2**63), "small": 32767, "body": ""},
    ]
    for mapping in mappings[2:]:
        mapping.update(queue_run_at=when, queue_enqueued_at=when)
    Rich.objects.bulk_create([Rich(**m, queue_run_at=when, queue_enqueued_at=when) for m in mappings[:2]])
    Rich.objects.bulk_create([Rich(**m) for m in mappings[2:]])
    mappings[:2] = [{}, {}]  # empty rows: every field takes its default (the times called once)
    plan = insert_plan(Rich, connection)
    assert plan is not None and Batch(plan, connection, mappings, {}, plan.literal).out  # no ORM detour
    assert Rich.objects.bulk_enqueue(mappings, batch_size=4) == len(mappings)
    pks = list(Rich.objects.order_by("pk").values_list("pk", flat=True))
    n = len(mappings)
    rows = [without(stored(Rich, pk), Rich, "ref", "created") for pk in pks]
    assert rows[2:n] == rows[n + 2 :]
    times = ("ref", "created", "queue_run_at", "queue_enqueued_at")
    empty = [without(stored(Rich, pk), Rich, *times) for pk in pks[:2] + pks[n : n + 2]]
    assert empty[0] == empty[1] == empty[2] == empty[3]
    ours = Rich.objects.filter(pk__in=pks[n : n + 2])
    assert len({(r.queue_run_at, r.queue_enqueued_at) for r in ours}) == 1  # the default called once
    refs = set(Rich.objects.values_list("ref", flat=True))
    assert len(refs) == 2 * n  # a unique field's callable default: one value per row


def test_bulk_enqueue_of_mappings_calls_a_default_once_and_makes_every_row_ready() -> None:
    before = timezone.now()
    assert Job.objects.bulk_enqueue([{}, {"name": "b"}, {"queue_state": QueueState.IDLE, "name": "c"}]) == 3
    rows = list(
        Job.objects.order_by("pk").values_list("name", "queue_state", "queue_run_at", "queue_enqueued_at")
    )
    assert [r[:2] for r in rows] == [("", "ready"), ("b", "ready"), ("c", "ready")]
    assert len({r[2] for r in rows}) == 1 and len({r[3] for r in rows}) == 1  # called once per call
    assert rows[0][2] >= before.replace(microsecond=0) - dt.timedelta(seconds=1)
    assert Job.objects.ready().count() == 3


def test_bulk_enqueue_mixes_instances_and_mappings_and_takes_expressions() -> None:
    rows: list[Any] = [Job(name="inst"), {"name": "map"}, {"name": "expr", "queue_run_at": DbNow()}]
    assert Job.objects.bulk_enqueue(rows) == 3
    assert sorted(Job.objects.values_list("name", flat=True)) == ["expr", "inst", "map"]
    assert Job.objects.ready().count() == 3


@pytest.mark.parametrize(
    ("rows", "error", "match"),
    [
        ([{"name": "ok"}, {"nmae": "typo"}], ValueError, r"has no field 'nmae'.*row 1"),
        ([{"name": "ok"}, {"id": 5}], ValueError, r"has no field 'id'"),
        ([{"fail_times": "many"}], ValueError, r"row 0: 'many' is not a valid fail_times"),
        ([{"name": "ok"}, {"queue_run_at": "not a time"}], ValueError, r"row 1: .*queue_run_at"),
        ([{"name": "a", "sleep": object()}], ValueError, r"row 0: .*sleep"),
        ([{"name": "ok"}, ["name", "x"]], TypeError, r"mappings of field names.*list \(row 1\)"),
        ([Ticket(subject="x")], TypeError, r"not Ticket"),
    ],
)
def test_bulk_enqueue_refuses_bad_rows_and_inserts_nothing(rows: list, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        Job.objects.bulk_enqueue(rows)
    assert not Job.objects.exists()


def test_bad_input_leaves_the_callers_transaction_usable() -> None:
    with transaction.atomic():
        Job(name="kept").save()
        with pytest.raises(ValueError, match="no field"):
            Job.objects.bulk_enqueue([{"name": "x"}, {"bogus": 1}])
        assert not transaction.get_rollback()
        Job.objects.bulk_enqueue([{"name": "also kept"}])
    assert sorted(Job.objects.values_list("name", flat=True)) == ["also kept", "kept"]


def test_bulk_enqueue_of_a_related_object_needs_it_saved(tables: None) -> None:
    with pytest.raises(ValueError, match="unsaved Customer"):
        Rich.objects.bulk_enqueue([{"customer": Customer(name="new")}])
    assert not Rich.objects.exists()


def test_bulk_enqueue_of_many_mappings_inserts_each_once() -> None:
    assert (
        Job.objects.bulk_enqueue([{"name": str(i)} if i % 3 else {} for i in range(2500)], batch_size=1000)
        == 2500
    )
    assert Job.objects.ready().count() == 2500
    named = sorted(int(n) for n in Job.objects.exclude(name="").values_list("name", flat=True))
    assert named == [i for i in range(2500) if i % 3]
