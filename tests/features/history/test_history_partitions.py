"""The attempt history partitioned by time (issue #25): conversion of a table with rows, partitions
made ahead, the catch-all, rotation by ``purgequeue``, and SQLite's plain batched purge."""

from __future__ import annotations

import re
import threading
import time
from datetime import datetime, timedelta
from io import StringIO
from itertools import pairwise

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.urls import reverse

from django_dbqueue.compat import UTC
from django_dbqueue.models import Message, QueueAttempt
from django_dbqueue.queue import partitions
from django_dbqueue.states import QueueState
from django_dbqueue.worker import Worker
from tests.conftest import every_database, wait_until

pytestmark = every_database("partitioning is each backend's own DDL (history_partitioning)")

#: Conversions are DDL: the tests that make them commit, and put the table back after.
db = pytest.mark.django_db(transaction=True)
TABLE = QueueAttempt._meta.db_table
skip_on_sqlite = pytest.mark.skipif(
    "os.environ.get('DATABASE_URL', 'sqlite').startswith('sqlite')",
    reason="SQLite has no table partitioning (test_sqlite_has_no_partitions_… is its test)",
)


@pytest.fixture
def history_table():
    """Put the table back as the migrations made it afterwards (the next tests expect that)."""
    yield
    with connection.cursor() as cursor:
        for leftover in (f"{TABLE}_unpartitioned", f"{TABLE}_partitioned"):
            cursor.execute(f"DROP TABLE IF EXISTS {connection.ops.quote_name(leftover)}")
    with connection.schema_editor() as editor:
        editor.delete_model(QueueAttempt)
        editor.create_model(QueueAttempt)


def db_now() -> datetime:
    return partitions.db_now()


def add_history(hours: range, now: datetime, model: str = "x.Y") -> None:
    """One attempt row per hour ago in ``hours``, each at half past (never on a cutoff's edge)."""
    QueueAttempt.objects.bulk_create(
        [
            QueueAttempt(
                model=model,
                object_id=str(h),
                attempt=1,
                finished_at=now - timedelta(hours=h, minutes=30),
                outcome="succeeded",
            )
            for h in hours
        ],
        batch_size=500,
    )


def where(pk: int) -> str:
    """The partition holding row ``pk``."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"SELECT tableoid::regclass::text FROM {TABLE} WHERE id = %s", [pk])
            return cursor.fetchone()[0]
        for p in partitions.partitioning().partitions() or []:
            cursor.execute(f"SELECT 1 FROM {TABLE} PARTITION ({p.name}) WHERE id = %s", [pk])
            if cursor.fetchone():
                return p.name
    raise AssertionError(f"row {pk} is in no partition")


def status() -> str:
    out = StringIO()
    call_command("partitionhistory", stdout=out)
    return out.getvalue()


@db
@skip_on_sqlite
def test_convert_keeps_every_row_and_id_while_outcomes_write_history(history_table) -> None:
    now = db_now()
    add_history(range(0, 40 * 24, 2), now)  # 40 days, a row every two hours
    before = set(QueueAttempt.objects.values_list("pk", flat=True))
    Message.objects.publish_many([{"kind": "test.echo", "payload": {"i": i}} for i in range(300)])
    stop = threading.Event()

    def drain() -> None:  # the outcomes API, writing history while the table changes under it
        try:
            while not stop.is_set() and Message.objects.filter(queue_state=QueueState.READY).exists():
                Worker(models=[Message], burst=True, handle_signals=False, max_jobs=20).run()
        finally:
            connection.close()

    drainer = threading.Thread(target=drain)
    drainer.start()
    call_command("partitionhistory", "--convert", "--ahead", "3", stdout=StringIO())
    drainer.join(timeout=120)
    stop.set()
    Worker(models=[Message], burst=True, handle_signals=False).run()

    assert before <= set(QueueAttempt.objects.values_list("pk", flat=True))
    assert Message.objects.filter(queue_state=QueueState.SUCCEEDED).count() == 300
    assert QueueAttempt.objects.filter(model="django_dbqueue.Message").count() == 300
    ids = list(QueueAttempt.objects.values_list("pk", flat=True))
    assert len(ids) == len(set(ids)) == len(before) + 300
    found = partitions.partitioning().partitions()
    assert found is not None and found[-1].catch_all
    dated = [p for p in found if p.lower is not None and not p.catch_all]
    # Up to three days ahead, without gaps. (Not "at least three partitions": in the last hour
    # of a day the conversion's bound is already the day after tomorrow, and two cover it.)
    assert dated and dated[-1].upper > now + timedelta(days=3)
    assert all(a.upper == b.lower for a, b in pairwise(dated))
    assert found[0].lower is None  # the converted rows' partition
    assert where(min(before)) == found[0].name
    # Django's side of the (id, finished_at) key: id is still the pk.
    one = QueueAttempt.objects.get(pk=min(before))
    assert one.object_id and QueueAttempt.objects.filter(pk=one.pk).delete()[0] == 1
    again = status()
    assert "partition(s)" in again and "catch-all" in again
    out = StringIO()
    call_command("partitionhistory", "--convert", stdout=out)
    assert "partitioned already" in out.getvalue()


@db
@skip_on_sqlite
def test_the_admin_reads_a_partitioned_history(history_table, admin_client) -> None:
    add_history(range(5), db_now())
    call_command("partitionhistory", "--convert", stdout=StringIO())
    pk = QueueAttempt.objects.order_by("pk").values_list("pk", flat=True).first()
    assert admin_client.get(reverse("admin:django_dbqueue_queueattempt_changelist")).status_code == 200
    assert admin_client.get(reverse("admin:django_dbqueue_queueattempt_change", args=[pk])).status_code == 200
    # The dashboard's charts read the history by time, across partitions.
    from django.core.cache import cache

    from django_dbqueue.admin.timeline import timeline

    cache.clear()
    add_history(range(3), db_now(), model="testapp.Ticket")  # within the last 3 hours
    assert timeline("testapp.Ticket", "default", "day").total("succeeded") == 3
    assert (
        admin_client.get(reverse("admin:testapp_ticket_dbqueue_dashboard"), {"span": "day"}).status_code
        == 200
    )


@db
@skip_on_sqlite
def test_catch_all_takes_an_out_of_range_row_and_making_ahead_moves_it(history_table) -> None:
    call_command("partitionhistory", "--convert", "--ahead", "2", stdout=StringIO())
    far = QueueAttempt.objects.create(
        model="x.Y",
        object_id="far",
        attempt=1,
        finished_at=db_now() + timedelta(days=20),
        outcome="succeeded",
    )
    found = partitions.partitioning().partitions()
    assert where(far.pk) == found[-1].name and found[-1].catch_all
    out = StringIO()
    call_command("partitionhistory", "--maintain", "--ahead", "25", stdout=out)
    assert re.search(r"Made 2\d partition\(s\) ahead", out.getvalue()), out.getvalue()
    moved = where(far.pk)
    assert moved != found[-1].name
    assert QueueAttempt.objects.get(pk=far.pk).object_id == "far" and QueueAttempt.objects.count() == 1
    # Made already: nothing more.
    assert partitions.make_ahead(span="daily", ahead=25) == []


@db
@skip_on_sqlite
def test_the_workers_ticker_makes_partitions_ahead_when_the_setting_says_so(history_table, settings) -> None:
    from django_dbqueue.worker.ticker import Ticker

    call_command("partitionhistory", "--convert", "--ahead", "1", stdout=StringIO())
    count = len(partitions.partitioning().partitions() or [])
    Ticker("t", None).upkeep()  # DBQUEUE_HISTORY_PARTITIONS unset: nothing
    assert len(partitions.partitioning().partitions() or []) == count
    settings.DBQUEUE_HISTORY_PARTITIONS, settings.DBQUEUE_HISTORY_PARTITIONS_AHEAD = "daily", 5
    ticker = Ticker("t", None)
    ticker.tick()
    made = partitions.partitioning().partitions() or []
    last = max(p.upper for p in made if p.upper is not None)
    assert len(made) > count and last == partitions.horizon(db_now(), "daily", 5) + timedelta(days=1)
    ticker.next_upkeep = 0
    ticker.upkeep()  # made already: nothing more
    assert len(partitions.partitioning().partitions() or []) == len(made)


@db
@skip_on_sqlite
def test_rotation_drops_old_partitions_deletes_the_rest_and_keeps_new_rows(history_table) -> None:
    now = db_now()
    start = (now - timedelta(days=10)).strftime("%Y-%m-%d")
    call_command("partitionhistory", "--convert", "--start", start, "--ahead", "2", stdout=StringIO())
    add_history(range(0, 10 * 24 - 1), now)  # within the dated partitions
    old_partitions = {p.name for p in partitions.partitioning().partitions() or []}
    out = StringIO()
    call_command("purgequeue", "--attempts-older-than", "5d", "--pause", "0", "--batch-size", "7", stdout=out)
    text = out.getvalue()
    assert re.search(r"QueueAttempt: [56] partition\(s\) wholly older than the cutoff dropped", text), text
    assert re.search(r"QueueAttempt: \d+ attempt\(s\) deleted", text), text
    kept = set(QueueAttempt.objects.values_list("object_id", flat=True))
    assert kept == {str(h) for h in range(0, 5 * 24)}  # rows are at half past: none on the edge
    left = {p.name for p in partitions.partitioning().partitions() or []}
    assert len(old_partitions - left) in (5, 6)  # the first (empty) one, and 4 or 5 days
    QueueAttempt.objects.create(
        model="x.Y", object_id="new", attempt=1, finished_at=db_now(), outcome="succeeded"
    )
    assert QueueAttempt.objects.filter(object_id="new").count() == 1


@db
@skip_on_sqlite
@pytest.mark.processes
def test_purge_by_partitions_does_not_hold_up_four_draining_workers(history_table, start_worker) -> None:
    now = db_now()
    start = (now - timedelta(days=8)).strftime("%Y-%m-%d")
    call_command("partitionhistory", "--convert", "--start", start, "--ahead", "2", stdout=StringIO())
    add_history(range(24, 8 * 24 - 1), now)
    Message.objects.publish_many([{"kind": "test.echo", "payload": {"i": i}} for i in range(2000)])
    worker = start_worker("django_dbqueue.Message", "--concurrency", "4", "--burst", "--no-schedules")
    done = Message.objects.filter(queue_state=QueueState.SUCCEEDED)
    assert wait_until(lambda: done.exists(), timeout=60, interval=0.01)  # the workers are draining
    started = time.monotonic()
    out = StringIO()
    call_command("purgequeue", "--attempts-older-than", "3d", "--pause", "0", stdout=out)
    purge_seconds = time.monotonic() - started
    assert done.count() < 2000 or purge_seconds > 0.5, "the drain ended before the purge could overlap it"
    assert worker.wait(timeout=120) == 0, worker.output[-3000:]
    assert "partition(s) wholly older than the cutoff dropped" in out.getvalue()
    assert purge_seconds < 10, purge_seconds
    assert Message.objects.filter(queue_state=QueueState.SUCCEEDED).count() == 2000
    assert QueueAttempt.objects.filter(model="django_dbqueue.Message").count() == 2000
    assert not re.search(r"lock wait timeout|deadlock|1205|55P03", worker.output, re.I), worker.output[-3000:]


@db
@pytest.mark.skipif(
    "not os.environ.get('DATABASE_URL', 'sqlite').startswith('sqlite')", reason="SQLite's answer"
)
def test_sqlite_has_no_partitions_and_purges_history_in_batches() -> None:
    with pytest.raises(
        CommandError, match="no table partitioning: purgequeue deletes old history in batches"
    ):
        call_command("partitionhistory", "--convert")
    assert "not partitioned" in status()
    add_history(range(0, 10 * 24, 6), datetime.now(UTC))
    out = StringIO()
    call_command("purgequeue", "--attempts-older-than", "5d", "--pause", "0", stdout=out)
    assert "QueueAttempt: 20 attempt(s) deleted" in out.getvalue()
    assert "partition" not in out.getvalue()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--start", "2026-01-01"], "--start only goes with --convert"),
        (["--convert", "--start", "2026-13-01"], "is not a date"),
        (["--granularity", "weekly"], "invalid choice"),
        (["--ahead", "0"], "between 1 and 400"),
        (["--convert", "--maintain"], "not allowed with"),
        (["--database", "nope"], "Unknown database alias"),
    ],
)
def test_bad_arguments(args, message) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("partitionhistory", *args)


@db
@skip_on_sqlite
def test_dry_run_and_a_start_in_the_future_change_nothing(history_table) -> None:
    out = StringIO()
    call_command("partitionhistory", "--convert", "--dry-run", stdout=out)
    assert "become the first partition" in out.getvalue()
    assert partitions.partitioning().partitions() is None
    with pytest.raises(CommandError, match="in the future"):
        call_command("partitionhistory", "--convert", "--start", "2999-01-01")
    assert partitions.partitioning().partitions() is None


@db
@pytest.mark.skipif("'mysql' not in os.environ.get('DATABASE_URL', '')", reason="MySQL/MariaDB DDL only")
def test_convert_again_finishes_a_conversion_stopped_after_its_swap(history_table) -> None:
    add_history(range(3), db_now())
    call_command("partitionhistory", "--convert", stdout=StringIO())
    kept = QueueAttempt.objects.order_by("pk").first()
    # What a conversion killed between its RENAME and its copy-back leaves: the old table,
    # holding a row the partitioned one has (kept) and one it lacks.
    left, q = f"{TABLE}_unpartitioned", connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {q(left)} LIKE {q(TABLE)}")
        cursor.execute(f"ALTER TABLE {q(left)} REMOVE PARTITIONING")
        cursor.execute(f"INSERT INTO {q(left)} SELECT * FROM {q(TABLE)} WHERE id = %s", [kept.pk])
        cursor.execute(
            f"INSERT INTO {q(left)} (id, model, object_id, attempt, worker_id, finished_at, outcome, error) "
            "VALUES (%s, 'x.Y', 'stray', 1, '', UTC_TIMESTAMP(6), 'succeeded', '')",
            [kept.pk + 5_000_000],
        )
    out = StringIO()
    call_command("partitionhistory", "--convert", stdout=out)
    assert "finished an interrupted conversion: 1 row(s) moved" in out.getvalue()
    assert QueueAttempt.objects.count() == 4 and QueueAttempt.objects.filter(object_id="stray").exists()
    assert left not in connection.introspection.table_names()
