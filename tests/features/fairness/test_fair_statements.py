"""The statements a fair or aging claim sends (issue #37's speed goal): on PostgreSQL the turn's
lock rides in the walk's statement, and so do the lock of the heads the fair order begins with
and the turn's move past them, so a fair claim of many keys sends the plain claim's statements
(with few keys, the rows beyond the heads are locked by one statement more, which moves the
turn again); an aging claim's two locking SELECTs are one statement. Counted with
``CaptureQueriesContext``, as a user's ``assertNumQueries`` would; and the order those
statements give is still the ranking of every due row."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext

from django_dbqueue.backends import backend_for
from django_dbqueue.fairness import bounded, options, rotation
from django_dbqueue.fairness.bounded import TurnNotTaken, locking_order
from django_dbqueue.fairness.options import fair_share_of
from django_dbqueue.fairness.ranking import fair_order
from django_dbqueue.queue.outcome import Outcome
from django_dbqueue.queue.record import record
from django_dbqueue.states import QueueState
from tests.conftest import every_database
from tests.features.fairness.scenarios import aged_and_fresh, fill
from tests.testapp.models import AgedJob, FairJob

pytestmark = [
    pytest.mark.django_db(transaction=True),
    every_database("the statements are each server's own SQL (backends/)"),
]


@pytest.fixture(autouse=True)
def _fresh_hints() -> None:
    bounded._ROWS_PER_KEY.clear()
    bounded._BOTH_SEGMENTS.clear()
    bounded._FULL_LOOSE_SCANS.clear()


@pytest.fixture
def unweighted() -> Iterator[None]:
    """FairJob without its weighted key "gold": a key the walk did not reach, but weighing
    3, is read by one statement more (fairness/bounded.py), which is not what is counted."""
    weights = FairJob.queue_fair_weights
    FairJob.queue_fair_weights = None
    options.fair_share_of.cache_clear()
    yield
    FairJob.queue_fair_weights = weights
    options.fair_share_of.cache_clear()


def _statements(model: Any, batch: int) -> int:
    """Statements of one claim of ``batch`` rows, without BEGIN/COMMIT and the periodic read
    of paused queues (both claims send those alike)."""
    with CaptureQueriesContext(connection) as captured:
        taken = model.objects.claim(batch)
    assert len(taken) == batch
    sent = [q["sql"] for q in captured.captured_queries]
    sent = [sql for sql in sent if sql not in ("BEGIN", "COMMIT") and "queuepause" not in sql]
    # Short jobs: each batch done before the next claim (nothing in flight, as in
    # bench/fair_claim.py; rows in flight add reads of their keys' further rows).
    record(model, taken[0].queue_claim(), [Outcome.succeeded(row) for row in taken])
    return len(sent)


@pytest.mark.parametrize(("keys", "batch"), [(200, 20), (50, 50)])
def test_a_fair_claim_sends_no_more_statements_than_the_plain_claim_or_three_more(
    unweighted: None, keys: int, batch: int
) -> None:
    """Beyond the plain claim's statements: none (PostgreSQL: the walk, with the turn's lock,
    the heads' lock and the turn's move, takes the place of the plain claim's locking
    SELECT), or the turn's lock, the walk and the turn's move (MySQL, MariaDB). 200 keys,
    20 a claim: the turn never wraps in these claims; 50 keys, 50 a claim: every claim walks
    both ranges of the round robin, in one statement once the walk's hint knows."""
    if not backend_for("default").bounded_fair:
        pytest.skip("SQLite ranks every due row (one writer; correct, not fast)")
    FairJob.objects.bulk_create([FairJob(customer=f"c{n % keys:03}") for n in range(keys * 20)])
    # The model's first claim creates its turn, the next teaches the hint; on PostgreSQL the
    # walk's text is prepared by the fourth (a PREPARE once per connection: backends/prepared.py).
    for _ in range(4):
        _statements(FairJob, batch)
    fair = [_statements(FairJob, batch) for _ in range(5)]
    FairJob.queue_fair_key = None
    options.fair_share_of.cache_clear()
    try:
        plain = [_statements(FairJob, batch) for _ in range(3)]
    finally:
        FairJob.queue_fair_key = "customer"
        options.fair_share_of.cache_clear()
    if backend_for("default").locking_ctes:
        assert max(fair) <= max(plain), (fair, plain)
    else:
        # MySQL/MariaDB: now and then a second walk, when the walk's budget of index entries
        # ran out before enough keys (bench/fair_claim.py: 8.6-8.8 statements a claim).
        assert statistics.median(fair) <= max(plain) + 3, (fair, plain)


def test_an_aging_claim_sends_as_many_statements_as_the_plain_claim_or_one_read_more() -> None:
    """PostgreSQL: the aged rows' and the plain claim's locking SELECTs are one statement.
    MySQL/MariaDB: with no row aged, one read without locks, then the plain claim's own."""
    backend = backend_for("default")
    if not backend.locking_union and not backend.reads_aged_rows_unlocked:
        pytest.skip("two locking SELECTs here: the aged rows', then the plain claim's")
    AgedJob.objects.bulk_create([AgedJob(customer="c") for _ in range(300)])
    aging, bound = _statements(AgedJob, 50), AgedJob.queue_aging
    AgedJob.queue_aging = None
    options.fair_share_of.cache_clear()
    try:
        plain = _statements(AgedJob, 50)
    finally:
        AgedJob.queue_aging = bound
        options.fair_share_of.cache_clear()
    assert aging == plain + (1 if backend.reads_aged_rows_unlocked else 0)


def test_an_aging_claim_takes_aged_rows_first_then_the_plain_order() -> None:
    old, fresh = aged_and_fresh(3, 5)
    taken = AgedJob.objects.claim(6)
    assert [row.pk for row in taken] == [row.pk for row in old] + [row.pk for row in fresh[:3]]
    assert AgedJob.objects.filter(queue_state=QueueState.RUNNING).count() == 6
    # What the statement locked beyond the batch: nothing (every other row still claimable).
    assert len(AgedJob.objects.claim(10)) == 2


@pytest.mark.parametrize("seed", range(6))
def test_the_walk_that_locks_the_turn_gives_the_ranking_of_every_due_row(seed: int) -> None:
    if rotation.locking_ctes(FairJob, "default", "customer") is None:
        pytest.skip("the turn is locked by its own statement here")
    fill(seed, turn_chance=1.0)
    fair = fair_share_of(FairJob)
    assert fair is not None
    turn_lock = rotation.locking_ctes(FairJob, "default", "customer")
    assert turn_lock is not None
    for window in (1, 5, 20, 100):
        with transaction.atomic():
            order, turn = locking_order(FairJob.objects.all(), fair, window, turn_lock)
        assert turn == rotation.last_served(FairJob, "default", "customer")
        assert order == fair_order(FairJob.objects.all(), fair, window), f"seed {seed}, window {window}"


def test_a_turn_another_claim_holds_is_waited_for() -> None:
    """The walk's statement skips a locked turn (no wait, no error); the claim then waits for
    it by its own statement and ranks what the other claim left."""
    if rotation.locking_ctes(FairJob, "default", "customer") is None:
        pytest.skip("the turn is locked by its own statement here")
    FairJob.objects.bulk_create([FairJob(customer=f"c{n % 4}") for n in range(40)])
    FairJob.objects.claim(4)
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute("SELECT last_key FROM django_dbqueue_queuefairturn FOR UPDATE")
            got: list[Any] = []
            claimer = threading.Thread(target=lambda: got.extend(_claim_and_close(4)))
            claimer.start()
            time.sleep(0.5)
            assert claimer.is_alive(), "the claim went on without the turn"
            cursor.execute("COMMIT")
            claimer.join(10)
        assert sorted(row.customer for row in got) == ["c0", "c1", "c2", "c3"]
    finally:
        other.close()


def _claim_and_close(batch: int) -> list[Any]:
    try:
        return FairJob.objects.claim(batch)
    finally:
        connection.close()


def test_a_walk_that_finds_the_turn_taken_says_so() -> None:
    if rotation.locking_ctes(FairJob, "default", "customer") is None:
        pytest.skip("the turn is locked by its own statement here")
    FairJob.objects.bulk_create([FairJob(customer="c")])
    fair = fair_share_of(FairJob)
    assert fair is not None
    turn_lock = rotation.locking_ctes(FairJob, "default", "customer")
    assert turn_lock is not None
    with transaction.atomic(), pytest.raises(TurnNotTaken):  # no turn yet: the claim creates it
        locking_order(FairJob.objects.all(), fair, 5, turn_lock)


def test_aged_rows_that_fill_the_batch_leave_the_rest_ready_for_the_next_claim() -> None:
    # Every row the first claim did not return stays READY (on MySQL/MariaDB the aged rows
    # are read without locks, then locked by primary key, a batch's worth at a time), and
    # the next claim takes the aged rows left, then the plain order.
    old, fresh = aged_and_fresh(4, 4)
    first = AgedJob.objects.claim(3)
    assert [row.pk for row in first] == [row.pk for row in old[:3]]
    assert AgedJob.objects.filter(queue_state=QueueState.READY).count() == 5
    second = AgedJob.objects.claim(3)
    assert [row.pk for row in second] == [old[3].pk, fresh[0].pk, fresh[1].pk]


def _claim_while_held(model: Any, held: list[Any], batch: int) -> list[Any]:
    """``model.objects.claim(batch)`` while another transaction holds the rows ``held``
    (locked by primary key, one row each: a lock of those rows only), asserting that the
    claim waited for none of them."""
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute("BEGIN")
            for pk in held:
                cursor.execute(f"SELECT id FROM {model._meta.db_table} WHERE id = %s FOR UPDATE", [pk])
            started = time.monotonic()
            taken = model.objects.claim(batch)
            assert time.monotonic() - started < 5
            cursor.execute("COMMIT")
    finally:
        other.close()
    return taken


def test_aged_rows_another_transaction_holds_are_passed_by() -> None:
    """Aged rows some other transaction holds are passed by without a wait (on MySQL/MariaDB
    the read without locks still finds them; their lock by primary key skips them): the
    claim takes the aged rows left, then the plain order, and the held ones stay READY."""
    if not backend_for("default").skip_locked:
        pytest.skip("no row locks here (SQLite): a claim is one writer's")
    old, fresh = aged_and_fresh(4, 4)
    held = [old[0].pk, old[1].pk]
    taken = _claim_while_held(AgedJob, held, 3)
    assert [row.pk for row in taken] == [old[2].pk, old[3].pk, fresh[0].pk]
    states = AgedJob.objects.filter(pk__in=held).values_list("queue_state", flat=True)
    assert set(states) == {QueueState.READY}
    assert [row.pk for row in AgedJob.objects.claim(3)] == [*held, fresh[1].pk]


def test_the_lock_of_chosen_rows_is_one_text_read_by_primary_key(unweighted: None) -> None:
    """PostgreSQL: the rows a fair claim chose are locked by ``pk = ANY(array)``, one
    statement text for any batch (built once), which the planner reads through the primary
    key. ``pk IN (SELECT unnest(array))`` was planned as a hash join against a sequential scan
    of the whole table at some thousands of rows (2.2 ms of a 12 ms claim at 12,500 rows)."""
    if not backend_for("default").binds_arrays:
        pytest.skip("one parameter per key here (pk IN (...)), planned by the index")
    # Few keys: the walk locks their heads, the rest of a batch is locked by primary key.
    FairJob.objects.bulk_create([FairJob(customer=f"c{n % 5}") for n in range(5000)])
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {FairJob._meta.db_table}")
    sent: list[tuple[str, Any]] = []

    def capture(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        sent.append((sql, params))
        return execute(sql, params, many, context)

    FairJob.objects.claim(10)  # the model's first claim creates its turn
    with connection.execute_wrapper(capture):
        for batch in (30, 50):
            assert len(FairJob.objects.claim(batch)) == batch
    locks = [(sql, params) for sql, params in sent if "= ANY(" in sql and "RECURSIVE" not in sql]
    assert len(locks) == 2 and locks[0][0] == locks[1][0], [sql for sql, _ in sent]
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {locks[1][0]}", locks[1][1])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Seq Scan on testapp_fairjob" not in plan, plan
    assert "testapp_fairjob_pkey" in plan, plan


def _heads_lock_or_skip() -> None:
    if not backend_for("default").locking_ctes:
        pytest.skip("the walk reads without locks here; the chosen rows are locked after it")


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("batch", [1, 5, 30])
def test_a_claim_of_unweighted_keys_takes_the_ranking_of_every_due_row(
    unweighted: None, seed: int, batch: int
) -> None:
    """The rows a claim takes (every key weighing 1; on PostgreSQL its walk locks the heads):
    the first ``batch`` rows of the ranking of every due row, in that order, with keys of very
    different sizes, priorities, rows in flight (their heads rank later and must not be
    locked) and the turn anywhere; and the turn is left past the last row's key."""
    fill(seed, turn_chance=1.0)
    fair = fair_share_of(FairJob)
    assert fair is not None
    expected = fair_order(FairJob.objects.all(), fair, batch)
    taken = FairJob.objects.claim(batch)
    assert [(row.pk, row.customer) for row in taken] == expected, f"seed {seed}, batch {batch}"
    assert rotation.last_served(FairJob, "default", "customer") == (True, expected[-1][1])
    # Nothing it did not take stayed locked or changed: every other due row is still READY.
    ready = FairJob.objects.filter(queue_state=QueueState.READY).count()
    with transaction.atomic():
        assert (
            len(
                list(FairJob.objects.filter(queue_state=QueueState.READY).select_for_update(skip_locked=True))
            )
            == ready
        )


def test_a_claim_of_many_keys_sends_the_plain_claims_statements(unweighted: None) -> None:
    _heads_lock_or_skip()
    FairJob.objects.bulk_create([FairJob(customer=f"c{n % 300:03}") for n in range(3000)])
    FairJob.objects.claim(10)  # the model's first claim creates its turn
    with CaptureQueriesContext(connection) as captured:
        assert len(FairJob.objects.claim(50)) == 50
    sent = [q["sql"].split()[0] for q in captured.captured_queries if "queuepause" not in q["sql"]]
    # BEGIN, the walk (turn, heads, move), the claim's UPDATE, COMMIT, the rows' read.
    assert sent == ["BEGIN", "WITH", "UPDATE", "COMMIT", "SELECT"], sent


def test_a_head_another_transaction_holds_is_passed_by(unweighted: None) -> None:
    """A head some other transaction holds (an operator's bulk action) is skipped by the
    walk's lock, tried once more by the rows' lock, and left for a later claim: the claim
    fills its batch from the next rows of the order, and waits for nothing."""
    _heads_lock_or_skip()
    FairJob.objects.bulk_create([FairJob(customer=f"c{n % 10}") for n in range(100)])
    FairJob.objects.claim(1)  # the model's first claim creates its turn
    fair = fair_share_of(FairJob)
    assert fair is not None
    held_pk = fair_order(FairJob.objects.all(), fair, 5)[0][0]
    taken = _claim_while_held(FairJob, [held_pk], 5)
    assert len(taken) == 5 and held_pk not in {row.pk for row in taken}
    assert FairJob.objects.get(pk=held_pk).queue_state == QueueState.READY
    assert held_pk in {row.pk for row in FairJob.objects.claim(5)}
