"""The claim protocol of the real code, driven by Hypothesis: random interleavings of enqueue,
claims, renewals, leases running out, outcomes of current and stale claims through
``record()``, atomic mode's transaction, cancel requests, the admin's bulk actions and the
rescue, from three workers on connections of their own, with the properties of the model
(protocol/queue.pml, docs/explanation/protocol-model.md) checked after every step:

1. no row is held by two live claims (a claim is live while the lease its worker last wrote
   has not run out, on the database's clock);
2. a late outcome is never written: ``record()`` writes an outcome exactly when its claim is
   the row's current one, and a rejected outcome leaves the row as it was;
3. no stuck row: every row is final, READY, or RUNNING under a token; the rescue takes every
   RUNNING row whose lease ran out; at the end, with the leases run out and the rescue run,
   every row can be drained to a final state;
4. atomic mode: the handler's effect (a Ledger row) commits at most once per enqueue, and
   exactly once for a SUCCEEDED row.

Time passes on the database's clock: a lease runs out when its ``queue_locked_until`` is set
in the past by the observer's connection (no fake clock). Nothing else may depend on wall time:
Hypothesis replays a sequence of rules and needs the same answers from the database each time
(otherwise it stops with ``FlakyStrategyDefinition``), so a failed attempt is retried at once
(a retry delay of 0, no jitter) rather than after the models' 5-second backoff, which a loaded
machine's example could outlast. The budget is
``DBQUEUE_PROTOCOL_EXAMPLES`` examples (``make protocol-hypothesis`` raises it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from django.db import connections, transaction
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from django_dbqueue.backends import DbNow
from django_dbqueue.models import QueueAttempt
from django_dbqueue.queue.lease import Claim
from django_dbqueue.queue.outcome import Outcome
from django_dbqueue.queue.record import record, renew
from django_dbqueue.queue.statements import statements
from django_dbqueue.retry import ExponentialBackoff
from django_dbqueue.states import QueueState
from django_dbqueue.tables.cancel_request import CancelRequest
from tests.testapp.models import AtomicJob, Job, Ledger

pytestmark = pytest.mark.django_db(transaction=True)

WORKERS = ("protocol_w0", "protocol_w1", "protocol_w2")
MODELS = (Job, AtomicJob)
FINAL = (QueueState.SUCCEEDED, QueueState.FAILED, QueueState.CANCELLED)
LEASE = timedelta(seconds=300)
MAX_ROWS = 6
EXAMPLES = int(os.environ.get("DBQUEUE_PROTOCOL_EXAMPLES", "15"))
LEDGER_KIND = "protocol"


@dataclass
class Held:
    """One claim a worker remembers: its rows and, per row, whether the lease it last wrote
    is still running (time passing clears it)."""

    worker: str
    model: type[Any]
    claim: Claim
    live: dict[Any, bool] = field(default_factory=dict)


def _queue_rows(model: type[Any]) -> Any:
    """The observer's (and the admin's) view: the queue QuerySet on the default connection."""
    return model.objects.using("default")


def _snapshot(model: type[Any], pk: Any) -> tuple[Any, ...]:
    return tuple(
        _queue_rows(model)
        .filter(pk=pk)
        .values_list("queue_state", "queue_token", "queue_attempts", "queue_locked_until", "queue_last_error")
        .get()
    )


def _decided(row: Any, end: str) -> Outcome:
    """The outcome a worker decides for ``row``: ``end`` as the rules draw it."""
    if end == "succeeded":
        return Outcome.succeeded(row)
    if end == "failed":
        return Outcome.failed(row, ValueError("planned"))
    if end == "given back":
        return Outcome.given_back(row)
    return Outcome.cancelled(row, "cancelled while running")


class Protocol(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        for model in MODELS:
            _queue_rows(model).all().delete()
        Ledger.objects.all().delete()
        CancelRequest.objects.all().delete()
        QueueAttempt.objects.all().delete()
        self.claims: list[Held] = []
        self.rows: list[tuple[type[Any], Any]] = []
        #: Enqueues of each atomic row so far: its effects count per enqueue.
        self.generation: dict[Any, int] = {}

    # -- helpers -------------------------------------------------------------------------

    def _token(self, model: type[Any], pk: Any) -> int | None:
        return _queue_rows(model).filter(pk=pk).values_list("queue_token", flat=True).get()

    def _current(self, held: Held, pk: Any) -> bool:
        return self._token(held.model, pk) == held.claim.token

    def _forget(self, held: Held, pk: Any) -> None:
        held.live.pop(pk, None)
        if not held.live and held in self.claims:
            self.claims.remove(held)

    def _record(self, held: Held, pk: Any, outcome: Outcome) -> None:
        """Property 2: written exactly when the claim is current; a rejected outcome changes
        nothing."""
        current = self._current(held, pk)
        before = _snapshot(held.model, pk)
        recorded = record(held.model, held.claim, [outcome])
        if current:
            assert pk in recorded.written or pk in recorded.already, (outcome.end, recorded)
        else:
            assert pk not in recorded.written, f"a late {outcome.end.value} was written over {before}"
            assert [o.pk for o in recorded.rejected] == [pk]
            assert _snapshot(held.model, pk) == before
        self._forget(held, pk)

    def _instance(self, held: Held, pk: Any) -> Any:
        row = held.model.objects.using(held.worker).get(pk=pk)
        row._queue_claim = held.claim
        return row

    # -- the rules -----------------------------------------------------------------------

    @initialize(workers=st.permutations(WORKERS))
    def some_rows_claimed(self, workers: list[str]) -> None:
        """Start with two rows of each mode, each claimed by a worker: the interleavings
        worth exploring (leases running out, take-overs, late outcomes) begin from there."""
        for atomic, worker in ((False, workers[0]), (True, workers[1])):
            self.enqueue(atomic, 2)
            self.claim(worker, atomic, 1)

    @precondition(lambda self: len(self.rows) < MAX_ROWS)
    @rule(atomic=st.booleans(), count=st.integers(1, 3))
    def enqueue(self, atomic: bool, count: int) -> None:
        model = AtomicJob if atomic else Job
        for _ in range(min(count, MAX_ROWS - len(self.rows))):
            row = model.objects.create(queue_state=QueueState.READY)
            self.rows.append((model, row.pk))
            self.generation[row.pk] = 1

    @rule(worker=st.sampled_from(WORKERS), atomic=st.booleans(), limit=st.integers(1, 3))
    def claim(self, worker: str, atomic: bool, limit: int) -> None:
        model = AtomicJob if atomic else Job
        taken = model.objects.using(worker).claim(limit=limit, worker_id=worker, lease=LEASE)
        if taken:
            claim = taken[0].queue_claim()
            assert all(row.queue_claim() is claim for row in taken)
            self.claims.append(Held(worker, model, claim, {row.pk: True for row in taken}))

    @precondition(lambda self: self.claims)
    @rule(data=st.data())
    def renew_lease(self, data: st.DataObject) -> None:
        held = data.draw(st.sampled_from(self.claims))
        ids = list(held.live)
        current = {pk for pk in ids if self._current(held, pk)}
        with connections[held.worker].cursor():  # the worker's own connection (record.renew's)
            kept = renew(held.model, ids, held.claim)
        assert kept == current, "renew kept a claim that is not the row's, or lost one that is"
        for pk in ids:
            if pk in kept:
                held.live[pk] = True
            else:
                self._forget(held, pk)

    @precondition(lambda self: self.rows)
    @rule(data=st.data(), every=st.booleans())
    def time_passes(self, data: st.DataObject, every: bool) -> None:
        """The database's clock passes one row's lease, or every lease running now."""
        chosen = list(self.rows) if every else [data.draw(st.sampled_from(self.rows))]
        for model, pk in chosen:
            _queue_rows(model).filter(pk=pk, queue_state=QueueState.RUNNING).update(
                queue_locked_until=DbNow() - timedelta(seconds=1)
            )
            for held in self.claims:
                if held.model is model and pk in held.live:
                    held.live[pk] = False

    @precondition(lambda self: self.claims)
    @rule(data=st.data(), end=st.sampled_from(["succeeded", "failed", "given back", "cancelled"]))
    def outcome(self, data: st.DataObject, end: str) -> None:
        """An outcome of any claim a worker still remembers: current or stale."""
        held = data.draw(st.sampled_from(self.claims))
        pk = data.draw(st.sampled_from(sorted(held.live)))
        if held.model is AtomicJob and end == "succeeded":
            end = "given back"  # atomic mode succeeds only with its effect: atomic_run
        self._record(held, pk, _decided(self._instance(held, pk), end))

    def _stale(self) -> list[tuple[Held, Any]]:
        return [(held, pk) for held in self.claims for pk in sorted(held.live) if not self._current(held, pk)]

    @precondition(lambda self: self.claims and self._stale())
    @rule(data=st.data(), end=st.sampled_from(["succeeded", "failed", "given back", "cancelled", "renew"]))
    def late_outcome(self, data: st.DataObject, end: str) -> None:
        """A worker that lost its claim (paused past its lease, its row rescued, maybe taken
        by another claim) comes back with an outcome, or renews."""
        held, pk = data.draw(st.sampled_from(self._stale()))
        if end == "renew":
            assert pk not in renew(held.model, [pk], held.claim), "a lost claim was renewed"
            self._forget(held, pk)
            return
        self._record(held, pk, _decided(self._instance(held, pk), end))

    @precondition(lambda self: any(held.model is AtomicJob for held in self.claims))
    @rule(data=st.data(), succeeds=st.booleans())
    def atomic_run(self, data: st.DataObject, succeeds: bool) -> None:
        """worker/atomic.py's transaction: the fenced row lock, the handler's effect, the
        outcome, one commit (or a rollback, then the failure recorded)."""
        held = data.draw(st.sampled_from([held for held in self.claims if held.model is AtomicJob]))
        pk = data.draw(st.sampled_from(sorted(held.live)))
        current = self._current(held, pk)
        row = self._instance(held, pk)
        failed = False
        with transaction.atomic(using=held.worker):
            locked = statements(AtomicJob, held.worker).lock_held([pk], held.claim)
            assert (pk in locked) == current
            if locked:
                Ledger.objects.using(held.worker).create(
                    kind=LEDGER_KIND, job_id=pk, attempt=self.generation[pk]
                )
                if succeeds:
                    assert pk in record(AtomicJob, held.claim, [Outcome.succeeded(row)]).written
                else:
                    transaction.set_rollback(True, using=held.worker)
                    failed = True
        if failed:
            self._record(held, pk, Outcome.failed(row, ValueError("handler raised")))
        else:
            self._forget(held, pk)

    @precondition(lambda self: self.rows)
    @rule(data=st.data())
    def cancel_running(self, data: st.DataObject) -> None:
        model, pk = data.draw(st.sampled_from(self.rows))
        running = _snapshot(model, pk)[0] == QueueState.RUNNING
        assert _queue_rows(model).filter(pk=pk).cancel_running("hypothesis") == int(running)

    @precondition(lambda self: self.rows)
    @rule(data=st.data(), action=st.sampled_from(["retry_now", "cancel", "enqueue", "reschedule"]))
    def admin_bulk_action(self, data: st.DataObject, action: str) -> None:
        """The QuerySet's bulk actions on a random subset: a RUNNING row is never touched."""
        chosen = data.draw(st.lists(st.sampled_from(self.rows), min_size=1, max_size=3, unique=True))
        for model in MODELS:
            ids = [pk for m, pk in chosen if m is model]
            if not ids:
                continue
            rows = _queue_rows(model).filter(pk__in=ids)
            running = {
                pk: _snapshot(model, pk) for pk in ids if _snapshot(model, pk)[0] == QueueState.RUNNING
            }
            if action == "reschedule":
                rows.reschedule(timedelta(0))
            else:
                if action == "enqueue":
                    for pk in ids:
                        if pk not in running and model is AtomicJob:
                            self.generation[pk] += 1  # a new enqueue: its effects count afresh
                getattr(rows, action)()
            for pk, before in running.items():
                assert _snapshot(model, pk) == before, f"{action}() changed a RUNNING row"

    @rule()
    def rescue(self) -> None:
        for model in MODELS:
            model.objects.rescue_expired()
            expired = _queue_rows(model).filter(
                queue_state=QueueState.RUNNING, queue_locked_until__lt=DbNow()
            )
            assert not expired.exists(), "the rescue left a RUNNING row whose lease ran out"

    # -- the properties, after every step -----------------------------------------------

    def _states(self) -> dict[Any, tuple[Any, ...]]:
        """Every row's queue columns, one query per model (the invariants run after every step)."""
        found: dict[Any, tuple[Any, ...]] = {}
        for model in MODELS:
            for pk, *columns in _queue_rows(model).values_list(
                "pk", "queue_state", "queue_token", "queue_locked_until"
            ):
                found[(model, pk)] = tuple(columns)
        return found

    @invariant()
    def no_row_held_by_two_live_claims(self) -> None:
        states = self._states()
        holders: dict[tuple[Any, Any], list[str]] = {}
        for held in self.claims:
            for pk, live in held.live.items():
                state, token, _ = states[(held.model, pk)]
                if not live:
                    continue
                # A claim whose lease its worker believes still runs: the row is its own, or
                # no longer running at all (ended or READY); never taken over by a new claim.
                assert token == held.claim.token or state != QueueState.RUNNING, (
                    f"{held.worker} believes its lease on pk={pk} runs while another claim holds the row"
                )
                if token == held.claim.token:
                    holders.setdefault((held.model, pk), []).append(held.worker)
        assert all(len(workers) == 1 for workers in holders.values()), holders

    @invariant()
    def no_stuck_row(self) -> None:
        for (_model, pk), (state, token, until) in self._states().items():
            if state == QueueState.RUNNING:
                assert token is not None and token > 0 and until is not None, (pk, state, token)
            elif state == QueueState.READY:
                assert token is None or token == 0, (pk, state, token)
            else:
                assert state in FINAL, (pk, state)

    @invariant()
    def atomic_effects_once_per_enqueue(self) -> None:
        effects: dict[tuple[int, int], int] = {}
        for job_id, attempt in Ledger.objects.filter(kind=LEDGER_KIND).values_list("job_id", "attempt"):
            effects[(job_id, attempt)] = effects.get((job_id, attempt), 0) + 1
        states = self._states()
        for model, pk in self.rows:
            if model is AtomicJob:
                count = effects.get((pk, self.generation[pk]), 0)
                assert count <= 1, f"pk={pk}: its effects committed {count} times for one enqueue"
                if states[(model, pk)][0] == QueueState.SUCCEEDED:
                    assert count == 1, f"pk={pk} SUCCEEDED without its effect"

    def teardown(self) -> None:
        """Bounded progress: every lease runs out, the rescue runs, and one worker drains
        the queue; every row ends final (no stuck row), atomic ones with their effect once."""
        for model in MODELS:
            _queue_rows(model).filter(queue_state=QueueState.RUNNING).update(
                queue_locked_until=DbNow() - timedelta(seconds=1)
            )
            model.objects.rescue_expired()
            _queue_rows(model).filter(queue_state=QueueState.READY).retry_now()
            for _ in range(4 * MAX_ROWS):
                taken = model.objects.using(WORKERS[0]).claim(limit=MAX_ROWS, worker_id="drain", lease=LEASE)
                if not taken:
                    break
                for row in taken:
                    if model is AtomicJob:
                        with transaction.atomic(using=WORKERS[0]):
                            assert statements(model, WORKERS[0]).lock_held([row.pk], row.queue_claim())
                            Ledger.objects.using(WORKERS[0]).create(
                                kind=LEDGER_KIND, job_id=row.pk, attempt=self.generation[row.pk]
                            )
                            row.mark_succeeded()
                    else:
                        row.mark_succeeded()
        for model, pk in self.rows:
            assert _snapshot(model, pk)[0] in FINAL, f"pk={pk} is stuck: {_snapshot(model, pk)}"
        self.atomic_effects_once_per_enqueue()


@pytest.fixture
def retries_due_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed attempt READY again at once (the attempt limit as the models have it): whether
    a later claim takes the row must not depend on how long the example took."""
    for model in MODELS:
        most = model.queue_retry.max_attempts
        monkeypatch.setattr(model, "queue_retry", ExponentialBackoff(base=0, jitter=0, max_attempts=most))


@pytest.fixture
def worker_connections() -> Any:
    """Three more connections to the test database, one per worker, under aliases of their
    own (Django's test case allows such dynamically created connections)."""
    for alias in WORKERS:
        connection = connections.create_connection("default")
        connection.alias = alias
        connections[alias] = connection
    yield
    for alias in WORKERS:
        connections[alias].close()
        del connections[alias]


# Slow: the full pass of every database runs it; the smoke runs of the older Pythons and
# Djangos do not.
@pytest.mark.slow
def test_the_protocol_holds_under_random_interleavings(
    worker_connections: Any, retries_due_at_once: None
) -> None:
    run_state_machine_as_test(
        Protocol,
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=30,
            deadline=None,
            derandomize=os.environ.get("DBQUEUE_PROTOCOL_RANDOM") is None,
            suppress_health_check=list(HealthCheck),
            database=None,
            # DBQUEUE_PROTOCOL_NO_SHRINK=1: report the first failing example as found (shrinking
            # replays it against the database many times).
            phases=[Phase.explicit, Phase.reuse, Phase.generate]
            + ([] if os.environ.get("DBQUEUE_PROTOCOL_NO_SHRINK") else [Phase.shrink]),
        ),
    )
