"""Concrete queue models the tests drive: their handlers do what their fields say."""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import connections, models, transaction

from django_dbqueue.exceptions import Discard, JobCancelled
from django_dbqueue.flow.unique import QueueUniqueKey
from django_dbqueue.models import QueueMixin
from django_dbqueue.queue.queryset import QueueQuerySetMixin
from django_dbqueue.retry import ExponentialBackoff
from django_dbqueue.workflows import WaitTimeout, Workflow, WorkflowMixin, steps_of, workflow

#: pks of the rows whose handler's on_commit() hook ran (action "hook"; workers run in-process).
COMMITTED_HOOKS: list[int] = []

#: Test code a row's handler runs first, by the row's name (workers run in-process).
HANDLER_HOOKS: dict[str, Callable[[Any], None]] = {}


class Ledger(models.Model):
    """One row per handler run: lets tests count how often each queue row ran."""

    kind = models.CharField(max_length=50)
    job_id = models.BigIntegerField()
    attempt = models.IntegerField()
    pid = models.IntegerField(default=os.getpid)

    class Meta:
        # A handler run is (row, attempt): the same attempt recorded twice would mean two
        # live claims held the row at once.
        constraints = [
            models.UniqueConstraint(fields=["kind", "job_id", "attempt"], name="ledger_one_run_per_attempt")
        ]


def _fork_a_sleeper(pid_file: str) -> None:
    """Fork a child that outlives this handler (a careless subprocess), as handlers do; its pid
    is added to ``pid_file``, a line each."""
    if os.fork() == 0:
        try:
            with open(pid_file, "a") as out:
                out.write(f"{os.getpid()}\n")
            time.sleep(600)
        finally:
            os._exit(0)


class Behaviour(QueueMixin):
    """What process() does is data, so one model covers many test scenarios."""

    name = models.CharField(max_length=100, blank=True, default="")
    action = models.CharField(max_length=20, default="ok")
    fail_times = models.IntegerField(default=0)
    sleep = models.FloatField(default=0)
    note = models.CharField(max_length=100, blank=True, default="")

    queue_retry = ExponentialBackoff(base=0.05, factor=2, max_delay=1, max_attempts=3, jitter=0)

    class Meta(QueueMixin.Meta):
        abstract = True

    def process(self) -> None:
        if self.name in HANDLER_HOOKS:
            HANDLER_HOOKS[self.name](self)
        if self.action == "hook":  # before any statement: no savepoint exists yet
            transaction.on_commit(lambda: COMMITTED_HOOKS.append(self.pk))
        elif self.action == "mark":  # a test in another process learns the handler has begun
            with open(self.note, "a") as started:
                started.write(f"{os.getpid()}\n")
        if self.sleep:
            time.sleep(self.sleep)
        Ledger.objects.create(kind=type(self).__name__, job_id=self.pk, attempt=self.queue_attempts)
        if self.action == "save":
            self.note = f"saved by attempt {self.queue_attempts}"
            self.save()
        elif self.action == "exit":
            raise SystemExit(3)
        elif self.action == "discard":
            raise Discard("not worth retrying")
        elif self.action == "mark-rollback":  # fails without raising: nothing may commit
            transaction.set_rollback(True)
        elif self.action in ("fork", "fork-hang"):  # leaves a child behind, its pid in file `note`
            _fork_a_sleeper(self.note)
        elif self.action == "segv":  # the worker process dies of a crash, as a C extension's would
            os.kill(os.getpid(), signal.SIGSEGV)
        if self.action in ("hang", "fork-hang"):
            while True:  # swallows its timeout, like a handler stuck in a C call
                try:
                    time.sleep(0.05)
                except BaseException:  # noqa: BLE001 - the point of this handler
                    pass
        if self.queue_attempts <= self.fail_times:
            raise ValueError(f"planned failure on attempt {self.queue_attempts}")


class Job(Behaviour):
    """Lease mode (at-least-once)."""


class AtomicJob(Behaviour):
    """Atomic mode: the ledger row commits with the outcome, exactly once."""

    queue_atomic = True


class GroupedAtomicJob(Behaviour):
    """Atomic mode, ten handlers per transaction, a savepoint each."""

    queue_atomic = True
    queue_atomic_group = 10


class OptimisticGroupJob(GroupedAtomicJob):
    """The same rows (a proxy), their groups optimistic: no savepoints, a failure runs the
    group again with them (worker/atomic.py)."""

    queue_atomic_group_optimistic = True

    class Meta:
        proxy = True


class TimeoutJob(Behaviour):
    queue_timeout = 0.5


class UniqueJob(Behaviour):
    """Lease mode, at most one active row per ``key`` (tests/features/flow/test_unique.py)."""

    key = models.CharField(max_length=50)
    queue_unique_key = QueueUniqueKey("key")


class SlowBase(QueueMixin):
    """Writes its ledger row, then works for ``seconds`` in small steps: a long handler for
    the cancel tests. With ``swallow`` it catches JobCancelled and returns as if done."""

    seconds = models.FloatField(default=30)
    swallow = models.BooleanField(default=False)

    class Meta(QueueMixin.Meta):
        abstract = True

    def process(self) -> None:
        Ledger.objects.create(kind=type(self).__name__, job_id=self.pk, attempt=self.queue_attempts)
        deadline = time.monotonic() + self.seconds
        while time.monotonic() < deadline:
            try:
                time.sleep(0.02)
            except JobCancelled:
                if not self.swallow:
                    raise
                return  # finishes "anyway": its outcome must be rejected


class SlowJob(SlowBase):
    """Lease mode."""


class AtomicSlowJob(SlowBase):
    queue_atomic = True


class TicketQuerySet(QueueQuerySetMixin, models.QuerySet):
    def urgent(self) -> models.QuerySet:
        return self.filter(queue_priority__gte=10)


class Ticket(QueueMixin):
    """A domain model with its own QuerySet and Meta, composed with the mixin."""

    subject = models.CharField(max_length=200)
    customer = models.IntegerField(default=0)
    handled = models.BooleanField(default=False)

    objects = TicketQuerySet.as_manager()

    class Meta(QueueMixin.Meta):
        ordering = ["id"]

    def process(self) -> None:
        self.handled = True
        self.save()


class Noop(QueueMixin):
    """A handler that does nothing: what is left is the queue's own cost."""

    payload = models.CharField(max_length=50, blank=True, default="")

    def process(self) -> None:
        pass


class AtomicNoop(Noop):
    """A proxy: same table, atomic mode (and its plain Meta must not trip the index check)."""

    queue_atomic = True

    class Meta:
        proxy = True


class AsyncJob(Job):
    """An ``async def`` handler, in lease mode."""

    class Meta:
        proxy = True

    async def process(self) -> None:  # type: ignore[override]
        await Ledger.objects.acreate(kind="AsyncJob", job_id=self.pk, attempt=self.queue_attempts)
        if self.action == "fail":
            raise ValueError("async failure")


class AsyncAtomicJob(AtomicJob):
    """An ``async def`` handler in atomic mode: its ORM calls join the job's transaction."""

    class Meta:
        proxy = True

    async def process(self) -> None:  # type: ignore[override]
        await Ledger.objects.acreate(kind="AsyncAtomicJob", job_id=self.pk, attempt=self.queue_attempts)
        if self.action == "fail":
            raise ValueError("async failure after a write")


# -- chaos suite (tests/chaos) ------------------------------------------------------------


class ChaosBatch(models.Model):
    """One publisher batch, inserted in the same transaction as its rows: after a database
    fault the publisher knows whether the batch committed, and the suite knows how many rows
    must exist in the end."""

    model = models.CharField(max_length=50)
    number = models.IntegerField()
    size = models.IntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["model", "number"], name="chaos_batch_once")]


class ChaosLedger(models.Model):
    """One row per handler run of a chaos row (``kind`` is 'lease' or 'atomic')."""

    kind = models.CharField(max_length=10)
    job_id = models.BigIntegerField()
    attempt = models.IntegerField()
    pid = models.IntegerField()
    worker = models.CharField(max_length=255, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["kind", "job_id", "attempt"], name="chaos_ledger_one_run_per_attempt"
            )
        ]


class ChaosArchive(models.Model):
    """What the suite's purge deleted: finished rows, their state and attempts."""

    kind = models.CharField(max_length=10)
    job_id = models.BigIntegerField()
    state = models.CharField(max_length=16)
    attempts = models.IntegerField()
    fail_times = models.IntegerField()
    last_error = models.TextField(blank=True, default="")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["kind", "job_id"], name="chaos_archive_once")]


class ChaosRow(QueueMixin):
    """A chaos work item: sleeps ``sleep`` s, writes its ledger row, fails ``fail_times``
    times (a poison row fails every time and must end FAILED with its reason)."""

    batch = models.IntegerField(default=0, db_index=True)
    sleep = models.FloatField(default=0)
    fail_times = models.IntegerField(default=0)

    # Enough attempts that kills and restarts never use them up; short delays.
    queue_retry = ExponentialBackoff(base=0.1, factor=2, max_delay=1, max_attempts=12, jitter=0)
    chaos_kind = ""

    class Meta(QueueMixin.Meta):
        abstract = True

    def process(self) -> None:
        if self.sleep:
            time.sleep(self.sleep)
        ChaosLedger.objects.create(
            kind=self.chaos_kind,
            job_id=self.pk,
            attempt=self.queue_attempts,
            pid=os.getpid(),
            worker=self.queue_locked_by or "",
        )
        if self.queue_attempts <= self.fail_times:
            raise ValueError(f"planned failure on attempt {self.queue_attempts}")


class ChaosLeaseJob(ChaosRow):
    """Lease mode: at-least-once (re-runs allowed only after a kill or a lost lease)."""

    chaos_kind = "lease"


class ChaosAtomicJob(ChaosRow):
    """Atomic mode, four handlers per transaction: the ledger row commits with the outcome."""

    chaos_kind = "atomic"
    queue_atomic = True
    queue_atomic_group = 4


class ChaosAtomicSingleJob(ChaosAtomicJob):
    """The same rows (a proxy), one handler per transaction: on MariaDB the path whose commit
    carries the outcome and the next row's lock (pipeline.py). The chaos runqueues consume
    both models, so each row goes through one path or the other."""

    queue_atomic_group = 1

    class Meta:
        proxy = True


class ChaosAtomicOptimisticJob(ChaosAtomicJob):
    """The same rows (a proxy), in optimistic groups of four (no savepoints; a failure runs
    the group again with them): the third path a chaos row may go through."""

    queue_atomic_group_optimistic = True

    class Meta:
        proxy = True


class HostileBase(QueueMixin):
    """Bad input for the worker: handlers that raise BaseException subclasses, delete their
    own row, or read a payload they cannot use."""

    action = models.CharField(max_length=20, default="ok")
    data = models.JSONField(null=True, blank=True)

    queue_retry = ExponentialBackoff(base=0.05, factor=2, max_delay=0.2, max_attempts=2, jitter=0)

    class Meta(QueueMixin.Meta):
        abstract = True

    def process(self) -> None:
        Ledger.objects.create(kind=type(self).__name__, job_id=self.pk, attempt=self.queue_attempts)
        if self.action in FAULTS:  # the fault table's hostile handlers (tests/chaos/faults)
            FAULTS[self.action](self)
        if self.action == "exit":
            raise SystemExit(3)
        if self.action == "interrupt":
            raise KeyboardInterrupt
        if self.action == "crash":  # like a segfault or the OOM killer: no clean-up at all
            os._exit(70)
        if self.action in ("delete", "delete-then-fail"):
            # The application deletes the row while the worker holds its claim.
            type(self).objects.filter(pk=self.pk).delete()
            if self.action == "delete-then-fail":
                raise ValueError("failed after the row was deleted")
        if self.action == "payload":
            # A handler that trusts its JSON: data must be an object with an integer "n".
            if not isinstance(self.data, dict) or not isinstance(self.data.get("n"), int):
                raise Discard(f"unusable payload: {str(self.data)[:100]!r}")


def _slow(row: HostileBase) -> None:
    time.sleep(float(row.data.get("sleep", 0)) if isinstance(row.data, dict) else 0)


def _segfault(row: HostileBase) -> None:
    import ctypes

    ctypes.string_at(0)  # reads address 0: SIGSEGV, no Python clean-up


def _close_connection(row: HostileBase) -> None:
    # Hostile on purpose: the handler closes the driver connection under Django's feet.
    connections[row._state.db or "default"].connection.close()


def _kill_session(row: HostileBase) -> None:
    """The server ends the handler's own session, asked from a second connection."""
    alias = row._state.db or "default"
    own = connections[alias]
    with own.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()" if own.vendor == "postgresql" else "SELECT CONNECTION_ID()")
        (session,) = cursor.fetchone()
    other = connections.create_connection(alias)
    try:
        with other.cursor() as cursor:
            if own.vendor == "postgresql":
                cursor.execute("SELECT pg_terminate_backend(%s)", [session])
            else:
                cursor.execute(f"KILL CONNECTION {int(session)}")
    finally:
        other.close()


def _raw_begin(row: HostileBase) -> None:
    with connections[row._state.db or "default"].cursor() as cursor:
        cursor.execute("BEGIN")


#: Hostile handlers of the fault table (tests/chaos/faults), by action.
FAULTS: dict[str, Callable[[HostileBase], None]] = {
    "slow": _slow,
    "segfault": _segfault,
    "close-connection": _close_connection,
    "kill-session": _kill_session,
    "leak-atomic": lambda row: transaction.atomic(using=row._state.db).__enter__(),
    "leak-autocommit": lambda row: transaction.set_autocommit(False, using=row._state.db),
    "leak-begin": _raw_begin,
}


class HostileJob(HostileBase):
    """Lease mode."""


class HostileAtomicJob(HostileBase):
    """Atomic mode: the handler's writes and the outcome commit together."""

    queue_atomic = True


# -- flow control (issue #22: per-key limits; tests/features/flow/test_flow*.py) -------------------------


class FlowLedger(models.Model):
    """One row per handler run of a limited job: its key and the handler's start and end on
    the host's clock (a test's workers share one host), to find overlapping runs."""

    kind = models.CharField(max_length=50)
    job_id = models.BigIntegerField()
    key = models.CharField(max_length=50, null=True)
    started = models.FloatField()
    ended = models.FloatField()
    pid = models.IntegerField(default=os.getpid)


class FlowJob(QueueMixin):
    customer = models.CharField(max_length=50, null=True, blank=True)
    sleep = models.FloatField(default=0)

    queue_retry = ExponentialBackoff(base=0.05, factor=2, max_delay=1, max_attempts=3, jitter=0)

    class Meta(QueueMixin.Meta):
        abstract = True

    def process(self) -> None:
        started = time.time()
        if self.sleep:
            time.sleep(self.sleep)
        FlowLedger.objects.create(
            kind=type(self).__name__, job_id=self.pk, key=self.customer, started=started, ended=time.time()
        )


class LimitedJob(FlowJob):
    """At most two RUNNING rows per customer, across every worker."""

    queue_limit_key = "customer"
    queue_concurrency_limit = 2


class RatedJob(FlowJob):
    """At most five claims per customer per second."""

    queue_limit_key = "customer"
    queue_rate_limit = (5, 1.0)


# -- durable workflows (issue #36) ----------------------------------------------------------------


class StepLedger(models.Model):
    """One row per run of a workflow step's body: no unique key, so a step run twice shows."""

    kind = models.CharField(max_length=50)
    job_id = models.BigIntegerField()
    step = models.IntegerField()
    pid = models.IntegerField(default=os.getpid)
    #: The row's attempt the body ran in (a crash's rescue starts the next one).
    attempt = models.IntegerField(default=0)
    #: The body found its own step's checkpoint committed already when it started: the
    #: engine ran a step it had recorded as done (issue #36's "no step run after its
    #: checkpoint committed"; must never be True).
    after_checkpoint = models.BooleanField(default=False)


class WorkflowBase(WorkflowMixin, QueueMixin):
    """An order-like workflow: step 1, an optional durable sleep (``nap`` s), an optional wait
    for the event ``event``, then steps 2..``steps``. Step ``slow_step`` works ``slow``
    seconds on the row's first attempt (a window to SIGKILL its worker in); a step's result
    is the running total of the step numbers, passed to the next."""

    steps = models.IntegerField(default=3)
    nap = models.FloatField(default=0)
    event = models.CharField(max_length=50, blank=True, default="")
    timeout = models.FloatField(null=True, blank=True)
    slow_step = models.IntegerField(default=0)
    slow = models.FloatField(default=0)
    fail_step = models.IntegerField(default=0)
    #: Seconds every step's body works (a window for the chaos run's kills to land in).
    pause = models.FloatField(default=0)
    got = models.JSONField(null=True, blank=True)

    queue_retry = ExponentialBackoff(base=0.05, factor=2, max_delay=1, max_attempts=5, jitter=0)

    class Meta(QueueMixin.Meta):
        abstract = True

    def queue_retry_policy(self) -> ExponentialBackoff:
        """``queue_retry``, except in the workflow chaos run's processes
        (``TESTAPP_WORKFLOW_ATTEMPTS`` in tests/chaos/settings.py): there SIGKILLs land every
        second or so, every one counts an attempt of each row of the dead worker's claim (each
        run of a row has its own number; the rows spared run again alone), and a row may go
        through a dozen claims. Five attempts were used up so (3 spared, 2 its own; CI, stop
        43): the row ended FAILED as its policy says, and "every workflow finished" measured
        the kill rate, not the queue."""
        attempts = getattr(settings, "TESTAPP_WORKFLOW_ATTEMPTS", None)
        if attempts is None:
            return type(self).queue_retry
        return dataclasses.replace(type(self).queue_retry, max_attempts=attempts)

    @workflow
    def process(self, wf: Workflow) -> None:
        total = wf.step("step-1", self.work, 1, 0)
        if self.nap:
            wf.sleep(self.nap)
        if self.event:
            try:
                data = wf.wait_for(self.event, timeout=self.timeout)
            except WaitTimeout:
                data = "timed out"
            wf.step("got-event", self.keep, data)
        for number in range(2, self.steps + 1):
            total = wf.step(f"step-{number}", self.work, number, total)
            wf.progress(number / self.steps, f"step {number} of {self.steps}")

    def work(self, number: int, total: int) -> int:
        StepLedger.objects.create(
            kind=type(self).__name__,
            job_id=self.pk,
            step=number,
            attempt=self.queue_attempts,
            after_checkpoint=steps_of(self).filter(name=f"step-{number}").exists(),
        )
        if self.pause:
            time.sleep(self.pause)
        if number == self.slow_step and self.queue_attempts == 1:
            time.sleep(self.slow)  # the scenario: a long step, killed while it runs
        if number == self.fail_step and self.queue_attempts == 1:
            raise ValueError(f"planned failure of step {number}")
        return total + number

    def keep(self, data: Any) -> None:
        type(self).objects.filter(pk=self.pk).update(got=data)


class AtomicWorkflow(WorkflowBase):
    """Atomic mode: each step's database effects commit with its checkpoint."""

    queue_atomic = True


class LeaseWorkflow(WorkflowBase):
    """Lease mode: steps run outside the outcome's transaction (at-least-once)."""


class GroupedAtomicWorkflow(WorkflowBase):
    """Atomic mode, four runs per transaction (each behind its savepoint)."""

    queue_atomic = True
    queue_atomic_group = 4


class WorkflowWake(QueueMixin):
    """bench/workflow_wake.py's row: a workflow that sleeps ``nap`` seconds (or, with no
    ``nap``, waits for the event "go"), then runs the step "woke" and ends. Every run adds
    one to ``runs`` in its own transaction (atomic mode), so a row that woke once ran twice.
    The step's checkpoint (``started_at``) is when the run that woke it got there."""

    nap = models.FloatField(default=0)
    runs = models.IntegerField(default=0)

    queue_atomic = True

    @workflow
    def process(self, wf: Workflow) -> None:
        type(self).objects.filter(pk=self.pk).update(runs=models.F("runs") + 1)
        if self.nap:
            wf.sleep(self.nap)
        else:
            wf.wait_for("go")
        wf.step("woke", _woke)


def _woke() -> None:
    """The step after the wake: its checkpoint's start time is the measurement."""


class FairJob(FlowJob):
    """Claims shared among customers (issue #37); "gold" weighs 3, the others 1."""

    queue_fair_key = "customer"
    queue_fair_weights = {"gold": 3}

    class Meta(QueueMixin.Meta):
        indexes = [
            *QueueMixin.Meta.indexes,
            models.Index(fields=["queue_state", "customer", "-queue_priority", "queue_run_at", "id"]),
            models.Index(fields=["queue_state", "customer"]),
        ]


class AgedJob(FlowJob):
    """A row due for 2 s is taken before higher priorities (issue #37)."""

    # bench/fair_claim.py --aging runs its workers with the bound (30 s) through this.
    queue_aging = float(os.environ.get("BENCH_AGING", "2"))

    class Meta(QueueMixin.Meta):
        indexes = [
            *QueueMixin.Meta.indexes,
            models.Index(fields=["queue_state", "queue_run_at"], name="agedjob_aging"),
        ]


class Tenant(models.Model):
    name = models.CharField(max_length=50)
    fair_weight = models.FloatField(default=1)


class TenantJob(QueueMixin):
    """Weights read from the tenants' own table, through the key (issue #37)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE)

    queue_fair_key = "tenant"
    queue_fair_weights = "tenant__fair_weight"
    queue_concurrency_limit = 4  # with a per-key limit too: the gate admits from the fair order
    queue_limit_key = "tenant"

    class Meta(QueueMixin.Meta):
        indexes = [
            *QueueMixin.Meta.indexes,
            models.Index(fields=["queue_state", "tenant", "-queue_priority", "queue_run_at", "id"]),
            models.Index(fields=["queue_state", "tenant"]),
        ]

    def process(self) -> None:
        return None
