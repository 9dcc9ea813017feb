"""Every way a claim can end, checked the same way: the state, the token's fencing of a late
outcome, the attempt row, the signal, ``task_finished`` of a ``TaskRecord``, and the count in
the row's batch. The table of these ends is in docs/explanation/fencing.md."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import django
import pytest
from django.utils import timezone

from django_dbqueue import signals
from django_dbqueue.composition import batch
from django_dbqueue.exceptions import Discard, JobCancelled
from django_dbqueue.models import Batch, QueueAttempt
from django_dbqueue.observability import metrics
from django_dbqueue.queue.outcome import End as Kind
from django_dbqueue.queue.outcome import Outcome
from django_dbqueue.queue.record import Recorded, record
from django_dbqueue.states import AttemptOutcome, QueueState
from tests.testapp.models import Job

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE_COLUMNS = ("queue_state", "queue_token", "queue_last_error", "queue_attempts", "queue_finished_at")


@dataclass(frozen=True)
class Expected:
    """One way a claim ends: what ``act`` does, and what it must leave."""

    state: QueueState
    #: "negated": the claim's token negated; "cleared": NULL; "alone": RUN_ALONE (READY again).
    token: str
    attempt: str | None  # the attempt row's outcome; None: the attempt is not counted, no row
    signal: str | None  # job_succeeded, job_failed (retry_at None or not), job_cancelled, None
    finished: bool  # the batch counts the row finished (and a TaskRecord sends task_finished)
    error: str = ""  # in the attempt row's error and the row's queue_last_error


def _expire(model: Any, pk: Any) -> None:
    model.objects.filter(pk=pk).update(queue_locked_until=timezone.now() - timedelta(seconds=5))


def _record(model: Any, row: Any, outcome: Outcome) -> Recorded:
    recorded = record(model, row.queue_claim(), [outcome])
    assert recorded.written == {row.pk} and recorded.rejected == []
    return recorded


def _succeed(model: Any, row: Any) -> None:
    _record(model, row, Outcome.succeeded(row))


def _retry(model: Any, row: Any) -> None:
    assert _record(model, row, Outcome.failed(row, ValueError("try again"))).retry_at[row.pk] is not None


def _fail(model: Any, row: Any) -> None:
    assert _record(model, row, Outcome.failed(row, Discard("no use"))).retry_at[row.pk] is None


def _retry_alone(model: Any, row: Any) -> None:
    _record(model, row, Outcome.retried_alone(row, RuntimeError("one of them harmed the worker")))


def _cancel_worker(model: Any, row: Any) -> None:
    # The handler raised JobCancelled: the operator's request, not a failure.
    outcome = Outcome.failed(row, JobCancelled("cancelled by ops"))
    assert outcome.end is Kind.CANCELLED
    _record(model, row, outcome)


def _cancel_lease_keeper(model: Any, row: Any) -> None:
    # The lease keeper knows only the key.
    assert record(model, row.queue_claim(), [Outcome.cancelled(row.pk, "cancelled by ops")]).written == {
        row.pk
    }


def _release(model: Any, row: Any) -> None:
    _record(model, row, Outcome.given_back(row))


def _release_alone(model: Any, row: Any) -> None:
    _record(model, row, Outcome.given_back(row.pk, alone=True))


def _defer(model: Any, row: Any) -> None:
    _record(model, row, Outcome.deferred(row, timezone.now() + timedelta(hours=1)))


def _unloadable(model: Any, row: Any) -> None:
    assert record(model, row.queue_claim(), [Outcome.unloadable(row.pk, "cannot load it")]).written == {
        row.pk
    }


def _after_commit_error(model: Any, row: Any) -> None:
    _succeed(model, row)
    _record(model, row, Outcome.hook_failed(row, RuntimeError("hook broke")))


def _rescue_dead(model: Any, row: Any) -> None:
    model.objects.filter(pk=row.pk).update(queue_attempts=99)
    _expire(model, row.pk)
    assert model.objects.rescue_expired() == 1


def _rescue_charged(model: Any, row: Any) -> None:
    _expire(model, row.pk)
    assert model.objects.rescue_expired() == 1


def _rescue_spared(model: Any, row: Any) -> None:
    """Another row of the same claim expires with it: the rescue cannot tell which one was
    running, so neither is charged (each runs again alone)."""
    other = model.objects.create(name="claimed with it")
    model.objects.filter(pk=other.pk).update(
        queue_state=QueueState.RUNNING, queue_token=row.queue_token, queue_attempts=1
    )
    model.objects.filter(pk=row.pk).update(queue_attempts=99)  # charged, this would be FAILED
    _expire(model, row.pk)
    _expire(model, other.pk)
    assert model.objects.rescue_expired() == 2


def _rescue_cancelled(model: Any, row: Any) -> None:
    row.request_cancel("ops")
    _expire(model, row.pk)
    assert model.objects.rescue_expired() == 1


ENDS: dict[str, tuple[Callable[[Any, Any], None], Expected]] = {
    "succeeded": (_succeed, Expected(QueueState.SUCCEEDED, "negated", "succeeded", "job_succeeded", True)),
    "retried": (
        _retry,
        Expected(QueueState.READY, "cleared", "retried", "job_failed(retry)", False, "try again"),
    ),
    "failed": (_fail, Expected(QueueState.FAILED, "negated", "failed", "job_failed", True, "no use")),
    "cancelled-worker": (
        _cancel_worker,
        Expected(QueueState.CANCELLED, "negated", "cancelled", "job_cancelled", True, "cancelled by ops"),
    ),
    "cancelled-lease-keeper": (
        _cancel_lease_keeper,
        Expected(QueueState.CANCELLED, "negated", "cancelled", "job_cancelled", True, "cancelled by ops"),
    ),
    # Given back or put off: the attempt is not counted, so it has no row and sends nothing.
    # One of the handlers run with it harmed the worker: READY at once, claimed by itself.
    "retried-alone": (
        _retry_alone,
        Expected(QueueState.READY, "alone", "retried", "job_failed(retry)", False, "harmed the worker"),
    ),
    "released": (_release, Expected(QueueState.READY, "cleared", None, None, False)),
    "released-alone": (_release_alone, Expected(QueueState.READY, "alone", None, None, False)),
    "deferred": (_defer, Expected(QueueState.READY, "cleared", None, None, False)),
    "unloadable": (
        _unloadable,
        Expected(QueueState.FAILED, "negated", "failed", "job_failed", True, "cannot load it"),
    ),
    # The job committed: the hook's error is kept on the row, nothing else is announced.
    "after-commit-error": (
        _after_commit_error,
        Expected(QueueState.SUCCEEDED, "negated", "succeeded", "job_succeeded", True),
    ),
    # The rescue: the lost attempt keeps a "lost" row; only a final state is announced.
    "rescue-charged": (
        _rescue_charged,
        Expected(QueueState.READY, "alone", "lost", None, False, "lease expired"),
    ),
    # Expired with another row of its claim: READY alone whatever its attempts, a "lost" row.
    "rescue-spared": (
        _rescue_spared,
        Expected(QueueState.READY, "alone", "lost", None, False, "lease expired"),
    ),
    "rescue-dead": (
        _rescue_dead,
        Expected(QueueState.FAILED, "negated", "lost", "job_failed", True, "lease expired"),
    ),
    "rescue-cancelled": (
        _rescue_cancelled,
        Expected(QueueState.CANCELLED, "negated", "cancelled", "job_cancelled", True, "ops"),
    ),
}


@pytest.fixture
def sent() -> Iterator[list[tuple[str, Any]]]:
    """The outcome signals sent, as (name, retry_at or reason)."""
    seen: list[tuple[str, Any]] = []

    def on_succeeded(sender: Any, row: Any, **kwargs: Any) -> None:
        seen.append(("job_succeeded", row.pk))

    def on_failed(sender: Any, row: Any, retry_at: Any, **kwargs: Any) -> None:
        seen.append(("job_failed" if retry_at is None else "job_failed(retry)", row.pk))

    def on_cancelled(sender: Any, row: Any, reason: str, **kwargs: Any) -> None:
        seen.append(("job_cancelled", row.pk))

    receivers = [
        (signals.job_succeeded, on_succeeded),
        (signals.job_failed, on_failed),
        (signals.job_cancelled, on_cancelled),
    ]
    for signal, receiver in receivers:
        signal.connect(receiver)
    yield seen
    for signal, receiver in receivers:
        signal.disconnect(receiver)


def _claimed_in_batch() -> tuple[Job, Batch]:
    row, opened, _child = _claimed_with_a_dependant()
    return row, opened


def _claimed_with_a_dependant() -> tuple[Job, Batch, Job]:
    """A row of a batch, claimed, and a row that waits for it (cancelled if it fails or is
    cancelled)."""
    with batch() as opened:
        parent = Job.objects.create(name="x")
    child = Job(name="child")
    assert child.enqueue(after=[parent], on_parent_failure="cancel") is False
    [row] = Job.objects.claim(lease=60)
    return row, opened, child


#: The metrics counter each signal adds to (issue #32: the drift cannot come back).
COUNTERS = {
    "job_succeeded": "succeeded",
    "job_failed": "failed",
    "job_failed(retry)": "retried",
    "job_cancelled": "cancelled",
}


def _counts() -> dict[str, float]:
    from prometheus_client import REGISTRY

    key = {"model": "testapp.Job", "queue": ""}
    return {
        name: REGISTRY.get_sample_value(f"dbqueue_jobs_{name}_total", key) or 0.0
        for name in COUNTERS.values()
    }


def _late_outcomes_change_nothing(row: Job, claim: Any) -> None:
    """Every constructor, recorded for a claim that is over, is rejected and writes nothing."""
    before = Job.objects.filter(pk=row.pk).values(*QUEUE_COLUMNS).get()
    attempts = QueueAttempt.objects.count()
    stale = Job.objects.get(pk=row.pk)
    stale._queue_claim = claim
    late = [
        Outcome.failed(stale, ValueError("late")),
        Outcome.retried_alone(stale, ValueError("late")),
        Outcome.unloadable(row.pk, "late"),
        Outcome.given_back(row.pk),
        Outcome.given_back(row.pk, alone=True),
        Outcome.deferred(row.pk, timezone.now()),
        Outcome.expired(stale, "late", final=True),
        Outcome.expired(stale, "late", final=False),
    ]
    if before["queue_state"] != QueueState.SUCCEEDED:
        # (A success repeated by the claim that recorded it is taken as already written.)
        late.append(Outcome.succeeded(stale))
    if before["queue_state"] != QueueState.CANCELLED:
        late.append(Outcome.cancelled(row.pk, "late"))  # (a repeat: already, not late)
    for outcome in late:
        recorded = record(Job, claim, [outcome])
        assert recorded.written == set() and recorded.rejected == [outcome], outcome.end
    assert Job.objects.filter(pk=row.pk).values(*QUEUE_COLUMNS).get() == before
    assert QueueAttempt.objects.count() == attempts


@pytest.mark.parametrize("name", list(ENDS))
def test_each_end(name: str, sent: list[tuple[str, Any]]) -> None:
    act, end = ENDS[name]
    metrics.connect()  # what the app does at start when prometheus_client is installed
    row, opened, child = _claimed_with_a_dependant()
    claim = row.queue_claim()
    counted_before = _counts()
    act(Job, row)

    stored = Job.objects.get(pk=row.pk)
    assert stored.queue_state == end.state
    expected_token = {"negated": -claim.token, "cleared": None, "alone": 0}[end.token]
    if end.token == "alone":
        from django_dbqueue.queue.lease import RUN_ALONE

        expected_token = RUN_ALONE
    assert stored.queue_token == expected_token
    assert stored.queue_locked_until is None
    if end.state in (QueueState.SUCCEEDED, QueueState.FAILED, QueueState.CANCELLED):
        assert stored.queue_finished_at is not None

    attempts = list(QueueAttempt.objects.filter(object_id=str(row.pk)).values_list("outcome", "error"))
    if end.attempt is None:
        assert attempts == []
    else:
        [(outcome, error)] = attempts
        assert outcome == end.attempt
        assert end.error in error

    expected = [] if end.signal is None else [(end.signal, row.pk)]
    assert sent == expected

    progress = Batch.objects.get(pk=opened.pk).progress()
    assert progress["pending"] == (0 if end.finished else 1), progress
    if end.finished:
        counted = {QueueState.SUCCEEDED: "succeeded", QueueState.FAILED: "failed"}.get(end.state, "cancelled")
        assert progress[counted] == 1, progress

    # The chain hook: the dependant runs after a success, is cancelled after a failure or a
    # cancellation, and still waits while its parent has work ahead.
    waiting = {QueueState.SUCCEEDED: QueueState.READY, QueueState.READY: QueueState.IDLE}
    assert Job.objects.get(pk=child.pk).queue_state == waiting.get(end.state, QueueState.CANCELLED)

    added = {name: after - counted_before[name] for name, after in _counts().items()}
    assert added == {name: float(COUNTERS.get(end.signal or "") == name) for name in added}, added

    _late_outcomes_change_nothing(row, claim)


def test_after_commit_error_is_kept_on_the_succeeded_row() -> None:
    row, _opened = _claimed_in_batch()
    _after_commit_error(Job, row)
    assert "hook broke" in Job.objects.get(pk=row.pk).queue_last_error


def test_a_late_success_on_a_cancelled_row_adds_no_attempt_row() -> None:
    row, _opened = _claimed_in_batch()
    claim = row.queue_claim()
    _cancel_lease_keeper(Job, row)
    assert record(Job, claim, [Outcome.succeeded(row)]).written == set()
    assert list(QueueAttempt.objects.values_list("outcome", flat=True)) == ["cancelled"]


# -- django.tasks: every final end of a TaskRecord sends task_finished -----------------------------

#: A task's default retry policy allows one attempt: its failures and lost attempts are final
#: (covered by "failed" and "rescue-dead").
TASK_ENDS = [
    name for name in ENDS if name not in ("after-commit-error", "retried", "rescue-charged", "rescue-spared")
]


@pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks arrived in Django 6.0")
@pytest.mark.parametrize("name", TASK_ENDS)
def test_task_finished_for_each_final_end(name: str) -> None:
    from django.tasks.signals import task_finished

    from django_dbqueue.models import TaskRecord
    from tests.testapp import tasks

    act, end = ENDS[name]
    finished: list[Any] = []

    def on_finished(sender: Any, task_result: Any, **kwargs: Any) -> None:
        finished.append(task_result)

    task_finished.connect(on_finished)
    try:
        result = tasks.add.enqueue(1, 2)
        [row] = TaskRecord.objects.claim(lease=60)
        act(TaskRecord, row)
    finally:
        task_finished.disconnect(on_finished)
    if end.finished:
        [task_result] = finished
        assert str(task_result.id) == str(result.id)
        assert task_result.status == ("SUCCESSFUL" if end.state == QueueState.SUCCEEDED else "FAILED")
    else:
        assert finished == []


# -- the vocabulary, defined once -----------------------------------------------------------------


def test_spark_outcome_columns_are_the_attempt_outcomes() -> None:
    from django_dbqueue.spark import aggregates, errors

    assert set(aggregates.OUTCOMES) == set(AttemptOutcome.values)
    assert set(aggregates.JOB_ENDS) <= set(AttemptOutcome.values)
    assert set(errors.ERROR_OUTCOMES) <= set(AttemptOutcome.values)


def test_dashboard_charts_every_attempt_outcome() -> None:
    from django_dbqueue.admin import charts, timeline

    assert set(timeline.OUTCOMES) == set(AttemptOutcome.values)
    assert set(charts.COLOURS) == set(AttemptOutcome.values)


# -- one statement per group -----------------------------------------------------------------------


def _statements(captured: Any) -> list[str]:
    """The statements sent, by their first word (savepoints and transaction control aside)."""
    kinds = []
    for query in captured.captured_queries:
        word = query["sql"].split()[0].upper()
        if word in ("SELECT", "UPDATE", "INSERT", "DELETE"):
            kinds.append(word)
    return kinds


def test_a_flush_of_successes_is_one_update_and_one_insert() -> None:
    """record() groups a claim's outcomes by their end: 20 successes are one fenced UPDATE and
    one INSERT … SELECT of their attempt rows, whatever the database."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    Job.objects.bulk_create([Job(name=str(i)) for i in range(20)])
    rows = Job.objects.claim(limit=20, lease=60)
    with CaptureQueriesContext(connection) as captured:
        recorded = record(Job, rows[0].queue_claim(), [Outcome.succeeded(row) for row in rows])
    assert recorded.written == {row.pk for row in rows}
    assert _statements(captured) == ["UPDATE", "INSERT"]
    assert set(Job.objects.values_list("queue_state", flat=True)) == {QueueState.SUCCEEDED}
    assert QueueAttempt.objects.filter(outcome=AttemptOutcome.SUCCEEDED).count() == 20


def test_mixed_ends_of_one_claim_are_written_together_and_announced_once_committed(
    sent: list[tuple[str, Any]],
) -> None:
    """Successes, a failure and a give-back of one claim in one call: one transaction, each
    end written as its own group, and the signals only after the commit."""
    from django.db import transaction

    Job.objects.bulk_create([Job(name=str(i)) for i in range(4)])
    a, b, c, d = Job.objects.claim(limit=4, lease=60)
    claim = a.queue_claim()
    outcomes = [
        Outcome.succeeded(a),
        Outcome.succeeded(b),
        Outcome.failed(c, Discard("no use")),
        Outcome.given_back(d),
    ]
    with transaction.atomic():
        recorded = record(Job, claim, outcomes)
        assert sent == []  # nothing announced before the commit
    assert recorded.written == {a.pk, b.pk, c.pk, d.pk} and recorded.retry_at == {c.pk: None}
    states = dict(Job.objects.values_list("pk", "queue_state"))
    assert states == {a.pk: "succeeded", b.pk: "succeeded", c.pk: "failed", d.pk: "ready"}
    assert sorted(sent) == sorted([("job_succeeded", a.pk), ("job_succeeded", b.pk), ("job_failed", c.pk)])
    assert (d.queue_state, d.queue_attempts, d._queue_claim) == ("ready", 0, None)
