"""Atomic mode's one-round-trip jobs on MariaDB (pipeline.py): the outcome, the commit and the
next job's fenced lock in one block, and every way that block's lock can fail to hold."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext

from django_dbqueue import direct
from django_dbqueue.history import QueueAttempt
from django_dbqueue.pipeline import CommitCarrier
from django_dbqueue.query import IDS
from django_dbqueue.states import QueueState
from django_dbqueue.worker import Worker
from tests.conftest import ledger_runs as ledger
from tests.testapp.models import HANDLER_HOOKS, AtomicJob, HostileAtomicJob, Job

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def mariadb() -> None:
    if not CommitCarrier.supported("default"):
        pytest.skip("the carried commit is MariaDB's (BEGIN NOT ATOMIC blocks)")


@pytest.fixture(autouse=True)
def _no_hooks_left():
    yield
    HANDLER_HOOKS.clear()


def make(model, *specs: dict) -> list:
    return [model.objects.create(**spec) for spec in specs]


def drain(model, **kwargs) -> tuple:
    worker = Worker(models=[model], burst=True, handle_signals=False, **kwargs)
    with CaptureQueriesContext(connection) as queries:
        stats = worker.run()
    return stats, [q["sql"] for q in queries.captured_queries]


def own_locks(statements: list[str]) -> int:
    """The jobs that locked their row with their own statement (not carried): the fenced
    ``SELECT pk … WHERE pk IN (…) AND queue_token = … FOR UPDATE``."""
    return sum(
        1
        for sql in statements
        if sql.startswith("SELECT") and "`queue_token` = " in sql and sql.rstrip().endswith("FOR UPDATE")
    )


def ran_once_with_history(jobs: list) -> list[tuple]:
    """Check that every AtomicJob of ``jobs`` ran once and SUCCEEDED with one attempt row
    finished when the row did; returns (row, attempt) pairs for further checks."""
    assert set(ledger(AtomicJob).values()) == {1} and len(ledger(AtomicJob)) == len(jobs)
    rows = {row.pk: row for row in AtomicJob.objects.all()}
    attempts = list(QueueAttempt.objects.filter(model=AtomicJob._meta.label))
    assert sorted(int(a.object_id) for a in attempts) == sorted(j.pk for j in jobs)
    pairs = [(rows[int(attempt.object_id)], attempt) for attempt in attempts]
    for row, attempt in pairs:
        assert row.queue_state == QueueState.SUCCEEDED and attempt.finished_at == row.queue_finished_at
        # The attempt is written from the claimed row's values: they are the row's own.
        assert (attempt.attempt, attempt.enqueued_at, attempt.due_at, attempt.claimed_at) == (
            row.queue_attempts,
            row.queue_enqueued_at,
            row.queue_run_at,
            row.queue_last_attempt_at,
        )
        assert (attempt.worker_id, attempt.outcome, attempt.error) == (row.queue_locked_by, "succeeded", "")
    return pairs


def carried(statements: list[str]) -> list[str]:
    return [sql for sql in statements if sql.startswith("BEGIN NOT ATOMIC") and "COMMIT" in sql]


def test_one_block_per_job_and_the_next_lock_rides_along(mariadb) -> None:
    jobs = make(AtomicJob, *({"name": str(i)} for i in range(30)))
    stats, statements = drain(AtomicJob, batch_size=10)
    assert (stats.succeeded, stats.failed, stats.lost) == (30, 0, 0)
    blocks = carried(statements)
    assert len(blocks) == 30
    # Within each batch of 10, every job but the last carries its successor's lock, so only
    # the first job of a batch locks its row with a statement of its own.
    assert sum("SET `queue_token` = `queue_token`" in sql for sql in blocks) == 27
    assert own_locks(statements) == 3
    for row, attempt in ran_once_with_history(jobs):
        assert row.queue_token < 0
        assert (attempt.outcome, attempt.attempt) == ("succeeded", 1)


@pytest.mark.parametrize("history", [True, False], ids=["history", "no-history"])
def test_a_handler_that_deletes_its_own_row_is_counted_lost_and_the_next_job_runs(
    mariadb, settings, history
) -> None:
    # Without history the block's count (1) cannot tell "written" from "next row locked":
    # the worker reads which.
    settings.DBQUEUE_HISTORY = history
    first, gone, last = make(HostileAtomicJob, {}, {"action": "delete"}, {})
    stats, statements = drain(HostileAtomicJob, batch_size=10)
    assert (stats.succeeded, stats.lost, stats.failed) == (2, 1, 0)
    assert len(carried(statements)) == 3
    assert not HostileAtomicJob.objects.filter(pk=gone.pk).exists()
    assert set(HostileAtomicJob.objects.values_list("queue_state", flat=True)) == {QueueState.SUCCEEDED}
    # What the deleting handler did commits, as everywhere in atomic mode.
    assert ledger(HostileAtomicJob) == {first.pk: 1, gone.pk: 1, last.pk: 1}
    # The block writes an attempt only for a row its UPDATE wrote: none for the deleted one.
    attempts = QueueAttempt.objects.filter(model=HostileAtomicJob._meta.label)
    expected = sorted([str(first.pk), str(last.pk)]) if history else []
    assert sorted(attempts.values_list("object_id", flat=True)) == expected


def test_a_next_row_taken_by_another_claim_is_not_locked_nor_run(mariadb) -> None:
    first, taken = make(AtomicJob, {"name": "first"}, {"name": "taken"})

    def steal(row) -> None:
        # Another worker's claim of the next row (its lease ran out and it was re-claimed),
        # committed on another connection while this handler runs.
        thread = threading.Thread(
            target=lambda: (
                AtomicJob.objects.filter(pk=taken.pk).update(queue_token=4242),
                connections.close_all(),
            )
        )
        thread.start()
        thread.join()

    HANDLER_HOOKS["first"] = steal
    stats, statements = drain(AtomicJob, batch_size=10)
    assert (stats.succeeded, stats.lost) == (1, 1)
    assert own_locks(statements) == 2  # the carried lock found nothing; "taken" tried its own
    assert ledger(AtomicJob) == {first.pk: 1}
    taken.refresh_from_db()
    assert (taken.queue_state, taken.queue_token) == (QueueState.RUNNING, 4242)


def test_a_carried_lock_that_times_out_does_not_undo_the_commit_before_it(mariadb) -> None:
    first, blocked = make(AtomicJob, {"name": "first"}, {"name": "blocked"})
    holding = threading.Event()

    def hold_next_row() -> None:
        # An operator's transaction holds the next row for 1.5 s.
        with transaction.atomic():
            AtomicJob.objects.select_for_update().filter(pk=blocked.pk).first()
            holding.set()
            time.sleep(1.5)
        connections.close_all()

    holder = threading.Thread(target=hold_next_row)

    def block_next(row) -> None:
        holder.start()
        assert holding.wait(10)
        with connection.cursor() as cursor:  # the worker's own session: give up after 1 s
            cursor.execute("SET SESSION innodb_lock_wait_timeout = 1")

    HANDLER_HOOKS["first"] = block_next
    stats, statements = drain(AtomicJob, batch_size=10)
    holder.join()
    # The carried lock waited 1 s and failed inside the block, after its COMMIT: "first"
    # stays committed, and "blocked" locked its row itself once the operator was done.
    assert (stats.succeeded, stats.failed, stats.lost) == (2, 0, 0)
    assert own_locks(statements) == 2
    assert ledger(AtomicJob) == {first.pk: 1, blocked.pk: 1}
    assert not QueueAttempt.objects.exclude(outcome="succeeded").exists()


def test_stopping_with_the_next_row_locked_gives_the_rest_back(mariadb) -> None:
    make(AtomicJob, *({"name": str(i)} for i in range(5)))
    worker = Worker(models=[AtomicJob], burst=True, handle_signals=False, batch_size=10)
    HANDLER_HOOKS["0"] = lambda row: worker.stop()
    stats = worker.run()
    assert (stats.succeeded, stats.released) == (1, 4)
    states = dict(AtomicJob.objects.values_list("name", "queue_state"))
    assert states == {"0": "succeeded", **{str(i): "ready" for i in range(1, 5)}}
    rest = AtomicJob.objects.exclude(name="0")
    assert set(rest.values_list("queue_attempts", "queue_token")) == {(0, None)}


def test_a_handler_that_marks_its_transaction_for_rollback_fails_its_attempt() -> None:
    # Every backend: with or without a carried commit, nothing of the job commits and the
    # attempt is a failure that keeps the reason.
    job, after = make(AtomicJob, {"action": "mark-rollback"}, {"name": "after"})
    stats, _ = drain(AtomicJob, batch_size=10)
    assert (stats.succeeded, stats.failed) == (1, 1)
    job.refresh_from_db()
    assert (job.queue_state, job.queue_attempts) == (QueueState.READY, 1)
    assert "TransactionManagementError" in job.queue_last_error
    assert ledger(AtomicJob) == {after.pk: 1}


def test_a_carrier_only_works_over_deferred_autocommit(mariadb) -> None:
    with pytest.raises(RuntimeError, match="deferred_autocommit"), CommitCarrier("default").active():
        pass


def test_success_blocks_write_integer_ids_into_the_text_and_pass_others_as_parameters(mariadb) -> None:
    make(Job, {"name": "int"}, {"name": "str"})
    qs = Job.queue_queryset("default")
    first, second = qs.claim(2)
    claim = first._queue_claim
    by_int = qs._success_block([first.pk], claim)
    by_str = qs._success_block([str(second.pk)], claim)
    assert by_int is not None and by_str is not None
    assert f"IN ({first.pk})" in by_int[0] and first.pk not in by_int[1] and IDS not in by_int[0]
    assert "IN (%s)" in by_str[0] and second.pk in by_str[1]
    for sql, params, _, per_row in (by_int, by_str):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql, params)
            assert cursor.rowcount == per_row  # the row written, and its history copied
    assert set(Job.objects.values_list("queue_state", flat=True)) == {QueueState.SUCCEEDED}
    copied = QueueAttempt.objects.filter(model=Job._meta.label, outcome="succeeded")
    assert sorted(copied.values_list("object_id", flat=True)) == sorted([str(first.pk), str(second.pk)])


HOSTILE_WORKER = "w'); DROP TABLE x; -- %s %(ids)d %% \\ /*dbqueue ids*/ /*dbqueue next id*/ `q`"


def test_unobserved_blocks_go_past_djangos_cursor_with_the_claims_constants_as_data(
    mariadb, monkeypatch
) -> None:
    # No query log and no execute wrapper but the worker's own: each block is text made once
    # per claim and sent on the driver's connection (django_dbqueue.direct). A worker id full of
    # quotes, placeholders and the text's own stand-ins is stored as data.
    jobs = make(AtomicJob, *({"name": str(i)} for i in range(12)))
    assert not connection.queries_logged
    sent: list[str] = []
    execute = direct.execute

    def counting(connection, sql, **kwargs):
        sent.append(sql)
        return execute(connection, sql, **kwargs)

    monkeypatch.setattr(direct, "execute", counting)
    stats = Worker(
        models=[AtomicJob], burst=True, handle_signals=False, batch_size=5, worker_id=HOSTILE_WORKER
    ).run()
    assert (stats.succeeded, stats.failed, stats.lost) == (12, 0, 0)
    assert len(carried(sent)) == 12  # every block went the direct way
    for row, attempt in ran_once_with_history(jobs):
        assert row.queue_locked_by == HOSTILE_WORKER and attempt.worker_id == HOSTILE_WORKER


def test_a_claims_block_text_is_what_the_parameters_would_make(mariadb) -> None:
    make(Job, {"name": "a"}, {"name": "b"})
    qs = Job.queue_queryset("default")
    first, second = qs.claim(2)
    claim = first._queue_claim
    claim.worker_id = HOSTILE_WORKER
    text = qs._success_commit(first, claim, lock_next=second.pk)
    assert text is not None and text.params is None
    by_params = qs._success_block([first.pk], claim, row=first, lock_next=second.pk)
    assert by_params is not None
    sql, params, _, _ = by_params
    connection.ensure_connection()
    # The finishing times differ (each call reads the clock): compare with the text's own.
    params[0] = params[-2] = connection.ops.adapt_datetimefield_value(text.finished_at)
    with connection.cursor() as cursor:
        assert text.sql == cursor.mogrify(sql, params)
