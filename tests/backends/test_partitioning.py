"""``history_partitioning``: the attempt history's time partitions on the servers that have them
(a real conversion, partitions added above the last and dropped, the catch-all), and the plain
refusal of SQLite; the bound helpers every database shares."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from django.db import connection

from django_dbqueue.backends import read_now
from django_dbqueue.backends.base import QueueBackend
from django_dbqueue.backends.partitioning import (
    HistoryPartitioning,
    PartitioningUnsupported,
    literal,
    parse_bound,
    partition_suffix,
)
from django_dbqueue.compat import UTC
from django_dbqueue.models import QueueAttempt

from .conftest import only, vendor

TABLE = QueueAttempt._meta.db_table


@pytest.fixture
def history(backend: QueueBackend) -> Iterator[HistoryPartitioning]:
    """The history table's partitioning; the table is put back as the migrations made it."""
    yield backend.history_partitioning(QueueAttempt)
    if backend.history_partitioning(QueueAttempt).supported:
        with connection.cursor() as cursor:
            for leftover in (f"{TABLE}_unpartitioned", f"{TABLE}_partitioned"):
                cursor.execute(f"DROP TABLE IF EXISTS {connection.ops.quote_name(leftover)}")
        with connection.schema_editor() as editor:
            editor.delete_model(QueueAttempt)
            editor.create_model(QueueAttempt)


def test_the_answer_names_the_table_and_its_columns(history: HistoryPartitioning) -> None:
    assert history.table == TABLE
    assert history.id_column == "id" and history.time_column == "finished_at"
    assert set(history.columns) == {f.column for f in QueueAttempt._meta.concrete_fields}
    assert history.supported is (vendor() != "sqlite")


def test_a_table_as_migrated_is_not_partitioned(history: HistoryPartitioning) -> None:
    assert history.partitions() is None
    history.finish_interrupted(lambda line: None)  # nothing was interrupted: nothing to do


@only("mysql", "postgresql", reason="SQLite has no table partitioning (checked below)")
def test_the_partition_clock_is_the_servers(history: HistoryPartitioning) -> None:
    before = read_now("default")
    assert before <= history.now() <= read_now("default")


@only("mysql", "postgresql", reason="SQLite has no table partitioning (checked below)")
def test_convert_add_drop_and_the_catch_all(history: HistoryPartitioning) -> None:
    today = history.now().replace(hour=0, minute=0, second=0, microsecond=0)
    bound, day = today + timedelta(days=1), timedelta(days=1)
    said: list[str] = []
    QueueAttempt.objects.create(
        model="x.Y", object_id="old", attempt=1, finished_at=today, outcome="succeeded"
    )

    history.convert(bound, [(bound, bound + day)], said.append)
    assert said
    first, dated, catch_all = history.partitions() or []
    assert (first.lower, first.upper) == (None, bound)
    assert (dated.lower, dated.upper) == (bound, bound + day)
    assert catch_all.catch_all and dated.name.endswith(partition_suffix(bound))

    # Beyond the last range: the catch-all takes it, the insert never fails for want of a partition.
    far = bound + 10 * day
    QueueAttempt.objects.create(model="x.Y", object_id="far", attempt=1, finished_at=far, outcome="succeeded")
    added = history.add([(bound + day, bound + 2 * day), (far, far + day)])
    assert len(added) == 2
    names = [p.name for p in history.partitions() or []]
    assert names[1:4] == [dated.name, *added] and names[-1] == catch_all.name
    # The row the catch-all held for a new range moved into it.
    q = connection.ops.quote_name
    if vendor() == "mysql":
        sql = f"SELECT COUNT(*) FROM {q(TABLE)} PARTITION ({q(added[1])})"
    else:  # a partition is a table of its own
        sql = f"SELECT COUNT(*) FROM {q(added[1])}"
    with connection.cursor() as cursor:
        cursor.execute(sql)
        assert cursor.fetchone()[0] == 1

    history.drop([dated.name])
    assert dated.name not in [p.name for p in history.partitions() or []]
    assert sorted(QueueAttempt.objects.values_list("object_id", flat=True)) == ["far", "old"]


@only("sqlite", reason="the servers' partitions are checked above")
def test_sqlite_refuses_every_partition_operation(history: HistoryPartitioning) -> None:
    moment = datetime(2026, 11, 27, tzinfo=UTC)
    for operation in (
        history.now,
        lambda: history.convert(moment, [], print),
        lambda: history.add([(moment, moment + timedelta(days=1))]),
        lambda: history.drop(["p20261127"]),
    ):
        with pytest.raises(PartitioningUnsupported, match="sqlite: this database has no table partitioning"):
            operation()


def test_bounds_are_utc_literals_and_read_back() -> None:
    moment = datetime(2026, 11, 25, tzinfo=UTC)
    assert literal(moment) == "'2026-11-25 00:00:00'"
    assert parse_bound(literal(moment)) == moment
    assert parse_bound("MAXVALUE") is None and parse_bound("MINVALUE") is None
    assert parse_bound("'2026-11-25 00:00:00+00'") == moment  # PostgreSQL's catalog text
    assert partition_suffix(moment) == "p20261125"
    assert partition_suffix(moment + timedelta(hours=6)) == "p202611250600"
