"""Durable workflows (issue #36), with an in-process worker: steps checkpointed and their
results passed on, one new step per transaction in atomic mode, durable sleep, events sent
before and after the wait, a rolled-back send, a wait's timeout, and a fork from step N."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.db.models import Count

import django_dbqueue
from django_dbqueue.backends import read_now as read_db_now
from django_dbqueue.models import Message, WorkflowEvent, WorkflowProgress, WorkflowStep
from django_dbqueue.worker import Worker
from django_dbqueue.workflows import Workflow, WorkflowMixin, fork_from, send_event, steps_of, workflow
from django_dbqueue.workflows.progress import Progress
from django_dbqueue.workflows.run import FOREVER
from django_dbqueue.workflows.statements import step_statements
from tests.conftest import every_database, wait_until
from tests.testapp.models import AtomicWorkflow, GroupedAtomicWorkflow, LeaseWorkflow, StepLedger

pytestmark = [
    pytest.mark.django_db(transaction=True),
    every_database("parking and waking go through each database's row locks and clock"),
]

MODES = [AtomicWorkflow, LeaseWorkflow]
#: Atomic mode with several runs per transaction, each behind its own savepoint.
ALL_MODES = [*MODES, GroupedAtomicWorkflow]


def read_now():
    return read_db_now("default")


def drain(model) -> dict[str, int]:
    return Worker(models=[model], burst=True, handle_signals=False).run().as_dict()


def runs_of_steps(row) -> dict[int, int]:
    counted = StepLedger.objects.filter(kind=type(row).__name__, job_id=row.pk)
    return dict(counted.values("step").annotate(n=Count("id")).values_list("step", "n"))


def results(row) -> dict[str, object]:
    return {step.name: step.result for step in steps_of(row)}


@pytest.mark.parametrize("model", ALL_MODES)
def test_each_step_runs_once_and_hands_its_result_to_the_next(model) -> None:
    row = model.objects.create(steps=4)
    model.objects.create(steps=2, event="never")  # a neighbour in the claim that parks for good
    stats = drain(model)
    row.refresh_from_db()
    assert row.queue_state == "succeeded"
    assert runs_of_steps(row) == {1: 1, 2: 1, 3: 1, 4: 1}
    # Each result is the running total the step was handed, plus its own number.
    assert results(row) == {"step-1": 1, "step-2": 3, "step-3": 6, "step-4": 10}
    assert [step.position for step in steps_of(row)] == [1, 2, 3, 4]
    if model.queue_atomic:
        # One new step per transaction: three runs parked (due at once), the fourth finished;
        # the neighbour parked once, for its event.
        assert (stats["parked"], stats["succeeded"]) == (4, 1)
    else:
        assert (stats["parked"], stats["succeeded"]) == (1, 1)
    assert row.queue_attempts == 1  # a park is not an attempt


def test_a_step_body_run_after_its_checkpoint_committed_says_so_in_the_ledger() -> None:
    """The chaos run's proof of "no step run after its checkpoint committed"
    (tests/chaos/workflows) rests on this probe of the test models' step bodies."""
    row = AtomicWorkflow.objects.create(steps=2)
    drain(AtomicWorkflow)
    assert not StepLedger.objects.filter(after_checkpoint=True).exists()
    row.refresh_from_db()
    row.work(2, 1)  # step 2's body once more, its checkpoint committed: what a replay bug would do
    assert list(StepLedger.objects.filter(after_checkpoint=True).values_list("step", flat=True)) == [2]


@pytest.mark.parametrize("model", ALL_MODES)
def test_a_failed_step_is_retried_alone(model) -> None:
    row = model.objects.create(steps=3, fail_step=2)
    for _ in range(40):
        drain(model)
        row.refresh_from_db()
        if row.queue_state == "succeeded":
            break
        time.sleep(0.05)  # the retry's backoff (50 ms) comes due
    assert row.queue_state == "succeeded"
    # Atomic: the failed attempt's ledger row rolled back with it; lease: it committed.
    assert runs_of_steps(row) == {1: 1, 2: 1 if model.queue_atomic else 2, 3: 1}
    assert results(row) == {"step-1": 1, "step-2": 3, "step-3": 6}


@pytest.mark.parametrize("model", MODES)
def test_a_durable_sleep_parks_the_row_and_wakes_it(model) -> None:
    row = model.objects.create(steps=2, nap=0.5)
    drain(model)
    row.refresh_from_db()
    sleep = WorkflowStep.objects.get(name="sleep-1")
    # Parked: READY, due when the sleep ends, held by no worker; only step 1 ran.
    assert (row.queue_state, row.queue_locked_by, row.queue_token) == ("ready", None, None)
    assert row.queue_run_at == sleep.wake_at > read_now()
    assert runs_of_steps(row) == {1: 1}
    assert wait_until(lambda: read_now() >= sleep.wake_at, timeout=10)
    drain(model)
    row.refresh_from_db()
    assert row.queue_state == "succeeded"
    assert row.queue_finished_at >= sleep.wake_at
    assert runs_of_steps(row) == {1: 1, 2: 1}


@pytest.mark.parametrize("model", MODES)
def test_an_event_sent_before_the_wait_is_kept_and_taken(model) -> None:
    row = model.objects.create(steps=2, event="paid")
    assert send_event(row, "paid", {"amount": 12}) is False  # nobody waits yet: kept
    drain(model)
    row.refresh_from_db()
    assert row.queue_state == "succeeded"
    assert row.got == {"amount": 12}
    assert not WorkflowEvent.objects.exists()  # taken once


@pytest.mark.parametrize("model", ALL_MODES)
def test_an_event_sent_after_the_wait_wakes_the_row_once(model) -> None:
    row = model.objects.create(steps=2, event="paid")
    drain(model)
    row.refresh_from_db()
    assert (row.queue_state, row.queue_run_at) == ("ready", FOREVER)
    assert runs_of_steps(row) == {1: 1}
    assert drain(model)["claimed"] == 0  # waiting costs no run
    assert row.send_event("paid", "txn-1") is True
    row.refresh_from_db()
    assert row.queue_run_at <= read_now()
    drain(model)
    row.refresh_from_db()
    assert row.queue_state == "succeeded"
    assert row.got == "txn-1"
    assert runs_of_steps(row) == {1: 1, 2: 1}
    assert not WorkflowEvent.objects.exists()


@pytest.mark.parametrize("model", MODES)
def test_an_event_sent_in_a_rolled_back_transaction_never_arrives(model) -> None:
    row = model.objects.create(steps=2, event="paid")
    drain(model)
    with pytest.raises(RuntimeError), transaction.atomic():
        assert row.send_event("paid", "never") is True
        raise RuntimeError("the view failed after sending")
    row.refresh_from_db()
    assert (row.queue_state, row.queue_run_at) == ("ready", FOREVER)
    assert not WorkflowEvent.objects.exists()
    assert drain(model)["claimed"] == 0
    assert row.got is None


@pytest.mark.parametrize("model", MODES)
def test_a_wait_that_times_out_takes_the_handlers_path(model) -> None:
    row = model.objects.create(steps=2, event="paid", timeout=0.3)
    drain(model)
    wait = WorkflowStep.objects.get(kind="wait")
    row.refresh_from_db()
    assert row.queue_run_at == wait.wake_at
    assert wait_until(lambda: read_now() >= wait.wake_at, timeout=10)
    drain(model)
    row.refresh_from_db()
    assert row.queue_state == "succeeded"
    assert row.got == "timed out"
    wait.refresh_from_db()
    assert wait.timed_out and wait.finished_at is not None
    # A late event is kept for a later wait; this one is over.
    assert row.send_event("paid", "late") is False


@pytest.mark.parametrize("model", MODES)
def test_fork_from_step_three_reruns_steps_three_and_on_only(model) -> None:
    row = model.objects.create(steps=5)
    drain(model)
    assert fork_from(row, 3) == 3
    row.refresh_from_db()
    assert (row.queue_state, row.queue_attempts) == ("ready", 0)
    drain(model)
    row.refresh_from_db()
    assert row.queue_state == "succeeded"
    assert runs_of_steps(row) == {1: 1, 2: 1, 3: 2, 4: 2, 5: 2}
    assert results(row)["step-5"] == 15


def test_bad_event_data_is_refused_and_writes_nothing() -> None:
    row = AtomicWorkflow.objects.create(event="paid")
    with pytest.raises(TypeError):
        send_event(row, "paid", {"when": timedelta(days=1)})
    with pytest.raises(ValueError):
        send_event(row, "", 1)
    with pytest.raises(TypeError, match="QueueMixin model"):
        WorkflowMixin.send_event(StepLedger(), "paid")  # type: ignore[arg-type]
    assert not WorkflowEvent.objects.exists()


@pytest.mark.parametrize("model", MODES)
def test_progress_is_kept_on_the_row_and_ends_at_the_last_value(model) -> None:
    row = model.objects.create(steps=4)
    drain(model)
    progress = WorkflowProgress.objects.get(model=model._meta.label, object_pk=str(row.pk))
    assert (progress.fraction, progress.message) == (1.0, "step 4 of 4")
    assert WorkflowProgress.objects.count() == 1


def test_progress_refuses_what_is_not_a_fraction() -> None:
    row = AtomicWorkflow.objects.create()
    row._queue_claim = AtomicWorkflow.objects.filter(pk=row.pk).claim()[0]._queue_claim
    progress = Progress(row, row.queue_claim())
    for bad, error in ((1.5, ValueError), (-0.1, ValueError), (float("nan"), TypeError), ("1", TypeError)):
        with pytest.raises(error):
            progress.report(bad)  # type: ignore[arg-type]
    progress.report(0.25, "a quarter")
    progress.report(0.5, "half")  # within the interval: remembered, not written
    assert WorkflowProgress.objects.get().message == "a quarter"
    progress.flush()
    assert WorkflowProgress.objects.get().message == "half"


@pytest.mark.databases(
    "mysql", "postgresql", reason="the sender runs in a second session while the run parks"
)
def test_an_event_sent_while_the_run_parks_wakes_it_in_lease_mode() -> None:
    """Lease mode: the wait found no event and wrote itself; the event comes before the run's
    park is written (the sender sees the row RUNNING, so it cannot wake it). The park's
    transaction looks for it after writing the row, and makes the row due now."""
    row = LeaseWorkflow.objects.create(steps=2, event="paid")
    sent: list[bool] = []

    def send_from_another_session() -> None:
        try:
            sent.append(send_event(LeaseWorkflow.objects.get(pk=row.pk), "paid", "raced"))
        finally:
            connections.close_all()

    def before_the_park(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        # The park's UPDATE: the only statement that carries the wait's due time, the year 9000.
        parking = sql.startswith("UPDATE") and LeaseWorkflow._meta.db_table in sql and "9000" in str(params)
        if parking and not sent:
            sender = threading.Thread(target=send_from_another_session)
            sender.start()
            sender.join(timeout=30)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(before_the_park):
        drain(LeaseWorkflow)
    assert sent == [False]  # the row was RUNNING: the sender could not wake it
    row.refresh_from_db()
    # Woken by the park's own look (not left due in the year 9000), so the same burst ran it on.
    assert (row.queue_state, row.got) == ("succeeded", "raced")
    assert runs_of_steps(row) == {1: 1, 2: 1}


@pytest.mark.databases(
    "mysql", "postgresql", reason="the sender runs in a second session while the run parks"
)
def test_an_event_sent_while_an_atomic_run_parks_waits_for_its_commit_and_wakes_it() -> None:
    """Atomic mode: the run holds its row's lock from its first statement, so it does not look
    for an event sent meanwhile (one statement fewer): the send's INSERT waits for that lock,
    and once the run committed its wait, the send's UPDATE sees it and wakes the row."""
    row = AtomicWorkflow.objects.create(steps=2, event="paid")
    sent: list[bool] = []
    senders: list[threading.Thread] = []

    def send_from_another_session() -> None:
        try:
            sent.append(send_event(AtomicWorkflow.objects.get(pk=row.pk), "paid", "raced"))
        finally:
            connections.close_all()

    def before_the_park(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        parking = sql.startswith("UPDATE") and AtomicWorkflow._meta.db_table in sql and "9000" in str(params)
        if parking and not senders:
            senders.append(threading.Thread(target=send_from_another_session))
            senders[0].start()
            time.sleep(0.3)  # the send reaches the row's lock and waits there
            assert not sent, "the send went through while the run held the row's lock"
        return execute(sql, params, many, context)

    with connection.execute_wrapper(before_the_park):
        drain(AtomicWorkflow)
    senders[0].join(timeout=30)
    assert sent == [True]  # it waited for the run's commit, then found the wait and woke it
    drain(AtomicWorkflow)
    row.refresh_from_db()
    assert (row.queue_state, row.got) == ("succeeded", "raced")
    assert runs_of_steps(row) == {1: 1, 2: 1}
    assert not WorkflowEvent.objects.exists()


@pytest.mark.databases(
    "mysql", "postgresql", reason="the sender runs in a second session between the claim and the run"
)
def test_an_event_sent_between_the_claims_preload_and_the_runs_lock_wakes_it() -> None:
    """Atomic mode, a claim of several rows: their events are read with the claim, before each
    run locks its row. An event sent in between finds the row RUNNING (no wake) and is not in
    what the run read; the park's own UPDATE finds it (``Park.due_if``) and makes the row due
    now, so the same burst runs it on."""
    rows = [AtomicWorkflow.objects.create(steps=2, event="paid") for _ in range(2)]
    sent: list[bool] = []
    preloads: list[str] = []

    def send_from_another_session() -> None:
        try:
            sent.append(send_event(AtomicWorkflow.objects.get(pk=rows[0].pk), "paid", "raced"))
        finally:
            connections.close_all()

    def after_the_preload(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        result = execute(sql, params, many, context)
        if sql.startswith("SELECT") and WorkflowEvent._meta.db_table in sql and " IN (" in sql:
            preloads.append(sql)
            if len(preloads) == 1:  # the first claim: its runs go on from step 1 to the wait
                sender = threading.Thread(target=send_from_another_session)
                sender.start()
                sender.join(timeout=30)
        return result

    with connection.execute_wrapper(after_the_preload):
        drain(AtomicWorkflow)
    assert sent == [False]  # the row was RUNNING: the sender could not wake it
    rows[0].refresh_from_db()
    assert (rows[0].queue_state, rows[0].got) == ("succeeded", "raced")
    assert runs_of_steps(rows[0]) == {1: 1, 2: 1}
    rows[1].refresh_from_db()
    assert (rows[1].queue_state, rows[1].queue_run_at) == ("ready", FOREVER)  # still waiting


def test_a_message_handler_can_be_a_workflow() -> None:
    @django_dbqueue.handler("test.workflow")
    @workflow
    def charge(message: Message, wf) -> None:  # type: ignore[no-untyped-def]
        amount = wf.step("reserve", lambda: message.payload["amount"])
        paid = wf.wait_for("paid")
        wf.step(
            "ship",
            lambda: StepLedger.objects.create(kind="message", job_id=message.pk, step=amount + paid).pk,
        )

    published = Message.objects.publish("test.workflow", {"amount": 5})
    assert published is not None
    message = published.message
    drain(Message)
    message.refresh_from_db()
    assert message.queue_state == "ready"  # parked, waiting for its event
    assert send_event(message, "paid", 2) is True
    drain(Message)
    message.refresh_from_db()
    assert message.queue_state == "succeeded"
    assert list(StepLedger.objects.filter(kind="message").values_list("step", flat=True)) == [7]


def test_a_step_that_returns_what_json_cannot_hold_fails_with_a_clear_error() -> None:
    row = LeaseWorkflow.objects.create(steps=1)
    claimed = LeaseWorkflow.objects.filter(pk=row.pk).claim()[0]
    wf = Workflow(claimed)
    with pytest.raises(TypeError, match="the workflow step 'bad' returned a value that cannot be stored"):
        wf.step("bad", lambda: {"when": timedelta(days=1)})
    assert not WorkflowStep.objects.filter(name="bad").exists()


def test_a_runs_read_of_its_checkpoints_gives_what_the_orm_gives() -> None:
    """workflows/statements.py reads the checkpoints with SQL built once and the ORM's own
    converters: every field of every kind comes back as a queryset would give it."""
    row = AtomicWorkflow.objects.create(steps=2, event="paid", timeout=60, nap=0.01)
    for _ in range(3):
        drain(AtomicWorkflow)  # step 1, the sleep, the wait (with its deadline)
    by_orm = {step.name: step for step in steps_of(row)}
    loaded = step_statements("default").load(AtomicWorkflow._meta.label, str(row.pk))
    assert {"step-1", "sleep-1", "wait:paid-1"} <= set(loaded)
    fields = [field.attname for field in WorkflowStep._meta.concrete_fields]
    for name, step in by_orm.items():
        assert [getattr(loaded[name], f) for f in fields] == [getattr(step, f) for f in fields], name
        assert loaded[name]._state.db == "default" and not loaded[name]._state.adding
