"""The bounded fair order (fairness/bounded.py) on the real server: the same rows, in the same
order, as the ranking of every due row (fairness/ranking.py), and a claim over a backlog of
20,000 due rows in 20,000 keys reads a bounded number of index entries, whatever the backlog
(counted by the server, not timed)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_dbqueue.backends import backend_for
from django_dbqueue.fairness import bounded, heads, options, rotation
from django_dbqueue.fairness.bounded import bounded_order
from django_dbqueue.fairness.options import fair_share_of
from django_dbqueue.fairness.ranking import fair_order
from django_dbqueue.states import QueueState
from tests.conftest import every_database
from tests.features.fairness.scenarios import fill
from tests.testapp.models import FairJob

pytestmark = [
    pytest.mark.django_db(transaction=True),
    every_database("the walk over the keys is each server's own SQL (backends/)"),
]


@pytest.fixture(autouse=True)
def _bounded_backend() -> None:
    if not backend_for("default").bounded_fair:
        pytest.skip("SQLite ranks every due row (one writer; correct, not fast)")
    # The walk's hints of this process: each test starts without.
    bounded._ROWS_PER_KEY.clear()
    bounded._BOTH_SEGMENTS.clear()
    bounded._FULL_LOOSE_SCANS.clear()


@pytest.mark.parametrize("weighted", [True, False])
@pytest.mark.parametrize("seed", range(10))
def test_the_bounded_order_is_the_ranking_of_every_due_row(seed: int, weighted: bool) -> None:
    """With and without the weighted key: unweighted, keys of every priority all rank 1 at
    their heads, and a head of priority 10 far along the round robin must not pass the heads
    before it (the order's tie-break is the round robin, not the priority: seeds 6 and 7
    failed while it was the priority)."""
    fill(seed)
    if not weighted:
        FairJob.queue_fair_weights = None
        options.fair_share_of.cache_clear()
    fair = fair_share_of(FairJob)
    assert fair is not None
    for window in (1, 5, 20, 100):
        assert bounded_order(FairJob.objects.all(), fair, window) == fair_order(
            FairJob.objects.all(), fair, window
        ), f"seed {seed}, window {window}"


@pytest.mark.parametrize("turn", ["k3", "k2x"])
def test_the_walk_back_to_the_turn_stops_there(turn: str) -> None:
    """The round robin's second range runs from the first key to the turn's key. A walk
    checks that bound on the key it stands on (PostgreSQL: not in each dive, see
    ``WalkStep``): when the turn's key has nothing due (its row in flight; or a key with no
    rows at all, "k2x"), the step from the key before it lands past it, on a key the first
    range served; that key is left out, and no key comes twice."""
    FairJob.queue_fair_weights = None
    options.fair_share_of.cache_clear()
    rows = FairJob.objects.bulk_create([FairJob(customer=f"k{n}") for n in range(1, 6)])
    FairJob.objects.filter(pk=rows[2].pk).update(queue_state=QueueState.RUNNING)  # k3's one row
    rotation.served(FairJob, "default", turn)
    fair = fair_share_of(FairJob)
    assert fair is not None
    for window in (1, 2, 4, 10):
        order = bounded_order(FairJob.objects.all(), fair, window)
        assert order == fair_order(FairJob.objects.all(), fair, window), window
        # After either turn the first range holds k4 and k5 (k3 has nothing READY).
        wanted = ["k4", "k5", "k1", "k2"]
        assert [key for _pk, key in order] == wanted[:window], window
    # The walk itself (the order above would hide a key walked twice: the ranking takes a
    # key once): the second range ends at the turn, though the step after k2 found k4.
    qs = FairJob.objects.all()
    walker = heads.Walker(qs, "customer", heads.filters_of(qs))
    segments = [heads.Segment("gt", turn), heads.Segment("lte", turn)]
    walked, _held, _turn = walker.walk(segments, 10, None)
    assert [[key for key, _head in keys] for keys, _ran_out in walked] == [["k4", "k5"], ["k1", "k2"]]


@pytest.fixture(autouse=True)
def _weights_back() -> Iterator[None]:
    weights = FairJob.queue_fair_weights
    yield
    FairJob.queue_fair_weights = weights
    options.fair_share_of.cache_clear()


def _handler_reads(run) -> int:
    """MariaDB/MySQL: the index and table entries the session read while ``run()`` ran."""
    with connection.cursor() as cursor:
        cursor.execute("FLUSH STATUS")
        run()
        cursor.execute("SHOW SESSION STATUS LIKE 'Handler_read%%'")
        return sum(int(value) for _, value in cursor.fetchall())


def _plan_rows(sql: str) -> int:
    """PostgreSQL: the rows every scan of a statement's plan returned, summed over loops
    (the statement as captured: the driver inlines its parameters)."""
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql.replace("%", "%%"))
        plan = cursor.fetchone()[0]
    plan = json.loads(plan) if isinstance(plan, str) else plan

    def scanned(node: dict) -> int:
        own = node["Actual Rows"] * node["Actual Loops"] if "Scan" in node["Node Type"] else 0
        return own + sum(scanned(child) for child in node.get("Plans", []))

    return scanned(plan[0]["Plan"])


def test_a_claim_over_twenty_thousand_keys_reads_a_bounded_number_of_entries() -> None:
    FairJob.objects.bulk_create([FairJob(customer=f"c{n:05}") for n in range(20_000)], batch_size=5000)
    FairJob.objects.claim(100)  # a turn in the middle of the keys
    read = -1
    with CaptureQueriesContext(connection) as captured:
        if connection.vendor == "mysql":
            read = _handler_reads(lambda: FairJob.objects.claim(100))
        else:
            FairJob.objects.claim(100)
    statements = [q["sql"] for q in captured.captured_queries]
    statements = [sql for sql in statements if sql not in ("BEGIN", "COMMIT", "FLUSH STATUS")]
    statements = [sql for sql in statements if not sql.startswith("SHOW SESSION STATUS")]
    assert not any("ROW_NUMBER" in sql.upper() for sql in statements)
    # the paused queues, the turn's lock, the walk (with the keys' RUNNING rows), the first
    # rows of the weighted key "gold" (the walk did not reach it; it has none), the lock, the
    # turn's UPDATE, the claim's UPDATE, the load of the rows
    assert len(statements) <= 8, "\n".join(sql[:100] for sql in statements)
    if connection.vendor == "mysql":
        # 200 keys walked (100 due, and 100 more for the 100 keys with a row in flight: their
        # first 800 index entries, a derived table, two dives each for the head; ~4,600
        # reads), 100 rows locked and loaded, 100 RUNNING rows counted: a ranking of every due
        # row reads all 20,000 and sorts them.
        assert read < 6_000, read
    else:
        # One index dive per key walked (200, see above), each returning one row.
        walk = next(sql for sql in statements if sql.startswith("WITH RECURSIVE"))
        assert _plan_rows(walk) < 1_000
