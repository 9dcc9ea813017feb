"""``backend_for`` and the flags and plain answers every backend gives: who it is, how it locks,
how it orders, whether Spark and LISTEN/NOTIFY are there, what it warns about, SQL text."""

from __future__ import annotations

import pytest
from django.db import connection, connections

from django_dbqueue.backends import BACKENDS, backend_for
from django_dbqueue.backends.base import QueueBackend
from tests.testapp.models import Job, Ledger

from .conftest import KIND, only, table, vendor


def test_backend_for_answers_the_connections_vendor_once(backend: QueueBackend) -> None:
    assert type(backend) is BACKENDS[vendor()]
    assert backend.vendor == connection.vendor
    assert backend.alias == "default"
    assert backend.connection is connections["default"]
    assert backend_for("default") is backend  # one per (alias, vendor): asked per job, built once


def test_an_unknown_vendor_gets_the_generic_answers(live_db: None) -> None:
    generic = QueueBackend("default")
    assert generic.vendor == "generic"
    assert (generic.skip_locked, generic.order_by_pk, generic.spark_jdbc, generic.can_notify) == (
        True,
        False,
        False,
        False,
    )
    assert not generic.is_lock_conflict(Exception("deadlock"))
    assert not generic.is_read_only(Exception("read only"))
    assert generic.server_in_transaction() is False
    assert generic.bound_idle_transactions(connection, 1) is False
    assert generic.table_row_estimate(Ledger._meta.db_table) is None
    assert generic.plan_row_estimate(Ledger.objects.all()) is None
    assert generic.session_room() is None
    assert generic.configuration_warning() is None
    assert generic.describe() == "generic (default)"


def test_describe_names_vendor_and_alias(backend: QueueBackend) -> None:
    assert backend.describe() == f"{connection.vendor} (default)"


def test_skip_locked_is_what_django_says_the_server_has(backend: QueueBackend) -> None:
    # The claim asks select_for_update(skip_locked=True): the flag must match the feature, or
    # the claim either fails (NotSupportedError) or compares-and-sets where it need not.
    assert backend.skip_locked == connection.features.has_select_for_update_skip_locked
    assert backend.skip_locked is (vendor() != "sqlite")


def test_order_by_pk_only_where_the_key_ends_every_index(backend: QueueBackend) -> None:
    # InnoDB's secondary index entries end with the primary key; PostgreSQL's and SQLite's do not.
    assert backend.order_by_pk is (vendor() == "mysql")


def test_the_claim_orders_by_pk_exactly_where_the_flag_says(backend: QueueBackend) -> None:
    order = list(Job.objects.in_claim_order().query.order_by)
    assert order[:3] == ["-queue_priority", "queue_run_at", "queue_enqueued_at"]
    assert order[3:] == (["pk"] if backend.order_by_pk else [])


def test_spark_jdbc_only_where_the_pipeline_has_a_driver(backend: QueueBackend) -> None:
    assert backend.spark_jdbc is (vendor() == "mysql")  # MariaDB Connector/J


def test_can_notify_only_with_listen_notify(backend: QueueBackend) -> None:
    assert backend.can_notify is (vendor() == "postgresql")


def test_the_test_settings_draw_no_configuration_warning(backend: QueueBackend) -> None:
    assert backend.configuration_warning() is None


@only("sqlite", reason="only SQLite's transaction mode makes workers fail where they need not")
def test_sqlite_without_immediate_transactions_is_warned_about(backend: QueueBackend) -> None:
    options = connection.settings_dict["OPTIONS"]
    kept = dict(options)
    try:
        for mode in (None, "DEFERRED"):
            options.pop("transaction_mode", None)
            if mode:
                options["transaction_mode"] = mode
            warning = backend.configuration_warning()
            assert warning is not None and '"transaction_mode": "IMMEDIATE"' in warning
        options["transaction_mode"] = "exclusive"
        assert backend.configuration_warning() is None
    finally:
        options.clear()
        options.update(kept)


@pytest.mark.parametrize("value", [42, -7, 12345678901])
def test_as_text_casts_a_column_to_text_the_server_compares(backend: QueueBackend, value: int) -> None:
    Ledger.objects.create(kind=KIND, job_id=value, attempt=1)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {backend.as_text(connection.ops.quote_name('job_id'))} FROM {table(Ledger)} "
            f"WHERE kind = %s AND {backend.as_text(connection.ops.quote_name('job_id'))} = %s",
            [KIND, str(value)],
        )
        assert list(cursor.fetchall()) == [(str(value),)]


def test_shares_named_parameters_where_a_repeated_name_is_quoted_once(backend: QueueBackend) -> None:
    # bulk_enqueue() sends a value every row shares as one named parameter used by every row
    # (queue/inserts.py): Django's cursor must pass a repeated name on, and the driver fill
    # every place with the one value.
    assert backend.shares_named_parameters is (vendor() == "mysql")
    with connection.cursor() as cursor:
        cursor.execute("SELECT %(a)s, %(b)s, %(a)s", {"a": 7, "b": "x"})
        assert tuple(cursor.fetchone()) == (7, "x", 7)
