"""Fair share and aging with real ``runqueue`` processes on the real server (issue #37), scaled
down for the regular suite (the full-size run is ``make bench-fairness``): four workers, one
busy tenant with 2,000 rows and 20 quiet tenants with 10 rows each: every quiet tenant's first
row is claimed within the first two claim cycles; under a saturating priority-10 backlog, no
aged priority-0 row is passed over by a priority-10 claim (whatever the machine's speed), and
none waits past the bound by more than a loaded machine's claim cycle."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from django_dbqueue.conf import settings
from django_dbqueue.states import QueueState
from tests.conftest import every_database, wait_until
from tests.testapp.models import AgedJob, FairJob

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.processes,
    every_database("the fair ranking is a window function each database runs in its own SQL"),
]
WORKERS, BATCH = 4, 4
#: See test_aging_bounds_the_wait_of_the_lowest_priority.
SLACK = timedelta(seconds=0.25)
#: Seconds a loaded machine (three test passes on two cores) may add to a claim cycle.
LOADED = 10.0


def test_every_quiet_tenant_starts_within_two_claim_cycles(start_worker) -> None:
    FairJob.objects.bulk_create([FairJob(customer="busy") for _ in range(2000)], batch_size=1000)
    FairJob.objects.bulk_create([FairJob(customer=f"quiet{n:02}") for n in range(20) for _ in range(10)])
    for _ in range(WORKERS):
        start_worker("testapp.FairJob", "--concurrency", "1", "--batch-size", str(BATCH))
    quiet = FairJob.objects.exclude(customer="busy")
    assert wait_until(lambda: not quiet.exclude(queue_state=QueueState.SUCCEEDED).exists(), timeout=120)

    # A claim stamps its rows with one database instant: the distinct instants are the claims.
    claims = sorted(
        set(
            FairJob.objects.exclude(queue_last_attempt_at=None).values_list(
                "queue_last_attempt_at", flat=True
            )
        )
    )
    second_cycle_ends = claims[2 * WORKERS - 1]
    first = {
        c: min(quiet.filter(customer=c).values_list("queue_last_attempt_at", flat=True))
        for c in set(quiet.values_list("customer", flat=True))
    }
    late = {c: t for c, t in first.items() if t > second_cycle_ends}
    assert not late, f"quiet tenants first claimed after the second cycle: {sorted(late)}"


def _stream_until(done, rows_per_tick: int) -> None:
    """The saturating stream: priority-10 rows arriving faster than the workers take them."""
    while not done():
        AgedJob.objects.bulk_create(
            [AgedJob(customer="high", queue_priority=10, sleep=0.01) for _ in range(rows_per_tick)]
        )
        time.sleep(0.05)  # the stream's pace (the scenario), not a wait for a condition


def test_aging_bounds_the_wait_of_the_lowest_priority(start_worker) -> None:
    AgedJob.objects.bulk_create([AgedJob(customer="high", queue_priority=10, sleep=0.01) for _ in range(20)])
    AgedJob.objects.bulk_create([AgedJob(customer="low", queue_priority=0) for _ in range(20)])
    for _ in range(2):
        start_worker("testapp.AgedJob", "--concurrency", "1", "--batch-size", str(BATCH))
    low = AgedJob.objects.filter(customer="low")
    deadline = time.monotonic() + 120
    _stream_until(
        lambda: not low.exclude(queue_state=QueueState.SUCCEEDED).exists() or time.monotonic() > deadline, 10
    )
    assert not low.exclude(queue_state=QueueState.SUCCEEDED).exists()
    assert AgedJob.objects.filter(customer="high", queue_state=QueueState.READY).exists()  # still saturated

    aging = timedelta(seconds=AgedJob.queue_aging)
    low_rows = list(low.values_list("queue_run_at", "queue_last_attempt_at"))
    waits = [claimed - due for due, claimed in low_rows]
    assert min(waits) >= aging * 0.9  # they did wait for the bound
    # The promise, independent of the machine's speed: once a row has waited the bound, it is
    # taken before any row that came due after it (aged rows go oldest first, so an older high
    # row that aged too may go first). A claim stamps its rows with its own database instant,
    # the one it compared the waits with. SLACK covers a low row another worker's claim held
    # locked (SKIP LOCKED passed it by) at that instant, to be stamped a moment later.
    high_rows = set(
        AgedJob.objects.filter(customer="high")
        .exclude(queue_last_attempt_at=None)
        .values_list("queue_run_at", "queue_last_attempt_at")
    )
    passed_over = [
        (due, claimed, taken)
        for due, claimed in low_rows
        for high_due, taken in high_rows
        if due + aging + SLACK <= taken < claimed and high_due > due
    ]
    assert not passed_over, f"younger rows claimed before an aged one: {len(passed_over)}, {passed_over[:3]}"
    # And the wall-clock bound the docs give (bound + a poll interval + a batch), with room for a
    # loaded machine, where one claim cycle of SQLite's single writer can take seconds.
    longest = max(waits)
    assert longest <= aging + timedelta(seconds=settings.POLL_INTERVAL + LOADED), f"longest wait {longest}"
