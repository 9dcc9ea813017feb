"""One run of a workflow row: what its handler's ``wf`` argument is.

The handler (``@workflow def process(self, wf)``) is replayed from the top on each run; the
calls of ``wf`` skip what the row's checkpoints say is done, and return what it returned.

* ``wf.step(name, fn, *args)`` runs ``fn(*args)`` unless the step named ``name`` finished
  before, and returns its result (through JSON either way). In atomic mode a run finishes one
  new step: the next one parks the row due now, so each step's database effects, its
  checkpoint and the row's state commit in one transaction, and a crash loses at most the
  step that was running. In lease mode the run goes on to the next step.
* ``wf.sleep(delta)`` / ``wf.sleep_until(when)`` park the row until then: the run ends, and no
  worker, connection or transaction waits for it.
* ``wf.wait_for(name, timeout=None)`` returns the data of the event ``name`` sent to the row
  (``send_event()``), parking the row until it comes; ``WaitTimeout`` once the timeout passed.
* ``wf.progress(fraction, message)`` says how far it is (throttled; see ``progress``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from django.db import connections
from django.utils import timezone

from ..compat import UTC
from ..exceptions import Park, WaitTimeout
from ..observability import traces
from ..observability.metrics import run_step
from ..queue.lease import as_timedelta
from ..tables.workflow import WorkflowStep
from . import checkpoints, events
from .progress import Progress
from .statements import step_statements

if TYPE_CHECKING:
    from ..queue.row import QueueRow

T = TypeVar("T")

#: The due time of a row that waits for an event with no timeout: the event wakes it.
FOREVER = datetime(9000, 1, 1, tzinfo=UTC)


def _stored(name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """What the step ``name`` (``fn(*args, **kwargs)``) returned, as a replay will see it."""
    return checkpoints.as_stored(fn(*args, **kwargs), name)


class Workflow:
    """The run of the workflow row ``row``, under the claim its worker holds."""

    def __init__(self, row: QueueRow) -> None:
        self.row = row
        self.claim = row.queue_claim()
        self.using = self.claim.using
        self.atomic = type(row).queue_atomic
        # Atomic mode where rows are locked: the run holds its row's lock from its first
        # statement to its commit, so a send either committed its event before the run read
        # its events, or waits for the commit and then sees the wait (events.py). A run that
        # parks needs no look of its own for an event sent meanwhile (one statement fewer).
        self.locked_run = self.atomic and connections[self.using].features.has_select_for_update
        held = checkpoints.load(row)
        self.done = held.checkpoints if held is not None else checkpoints.read(row, self.using)
        #: The row's events not received, read with the claim (a locked run only: a send
        #: waits for the run's lock); None: a wait reads them itself, behind the lock.
        self.events = held.events if held is not None and self.locked_run else None
        #: ... read before the row's lock (a claim's preload): the park of a wait looks for
        #: one sent in between.
        self.events_early = held is not None and not held.locked
        #: Atomic mode: this run finished a new step (the next one is the next run's).
        self.stepped = False
        self._counts: dict[str, int] = {}
        #: Made by the first progress() call: most runs report none, and write none.
        self._progress: Progress | None = None
        self.label, self.object_pk = row._meta.label, str(row.pk)  # the row in the checkpoints

    # -- steps ---------------------------------------------------------------------------------

    def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` as the step ``name``, once: a step that finished
        before returns what it returned then. The result must be JSON (the payload limit
        applies); it comes back through JSON on the first run too."""
        checkpoint = self._checkpoint(name, WorkflowStep.STEP)
        if checkpoint is not None:
            return checkpoint.result
        if self.atomic and self.stepped:
            # One new step per transaction: this one is the next run's (due now).
            raise Park(reason=f"next step: {name}")
        started = self.claim.now()
        # The step's value is made storable inside its span and its timing, so a value that
        # cannot be stored counts as the step's failure.
        if traces.active():
            with traces.step_span(self.row, name):
                result = run_step(self.row, name, _stored, name, fn, args, kwargs)
        else:  # no span to open: none of a context manager's calls
            result = run_step(self.row, name, _stored, name, fn, args, kwargs)
        if self.atomic:  # the worker's transaction holds the row: no block to enter (writing())
            self._write_step(name, started, result)
        else:
            with checkpoints.writing(self.row, self.using):
                self._write_step(name, started, result)
        self.stepped = True
        return result

    # -- durable sleep --------------------------------------------------------------------------

    def sleep(self, duration: float | timedelta, name: str | None = None) -> None:
        """Park the row for ``duration`` (seconds or a timedelta, from the database's clock
        when the run first reached this sleep), then go on."""
        self._sleep(as_timedelta(duration, "sleep()"), name)

    def sleep_until(self, when: datetime, name: str | None = None) -> None:
        """Park the row until ``when`` (timezone-aware), then go on; a time passed goes on."""
        if not isinstance(when, datetime) or timezone.is_naive(when):
            raise ValueError(f"sleep_until() takes a timezone-aware datetime, not {when!r}")
        self._sleep(when, name)

    def _sleep(self, wake: datetime | timedelta, name: str | None) -> None:
        key = name or self._auto("sleep")
        checkpoint = self._checkpoint(key, WorkflowStep.SLEEP)
        if checkpoint is None:
            now = self.claim.now()
            wake_at = now + wake if isinstance(wake, timedelta) else wake
            with checkpoints.writing(self.row, self.using):
                checkpoint = self._write(key, WorkflowStep.SLEEP, now, wake_at=wake_at, finished_at=wake_at)
        if checkpoint.wake_at is not None and checkpoint.wake_at > self.claim.now():
            raise Park(checkpoint.wake_at, reason=f"sleeps until {checkpoint.wake_at.isoformat()}")

    # -- events ----------------------------------------------------------------------------------

    def wait_for(self, event: str, timeout: float | timedelta | None = None, name: str | None = None) -> Any:
        """The data of the event ``event`` sent to this row (``send_event()``): one sent
        before is taken at once; otherwise the row parks until it comes. With ``timeout``
        (seconds or a timedelta from when the run first reached this wait), raises
        :class:`~django_dbqueue.exceptions.WaitTimeout` once it passed."""
        limit = as_timedelta(timeout, "wait_for(timeout=...)") if timeout is not None else None
        key = name or self._auto(f"wait:{event}")
        checkpoint = self._checkpoint(key, WorkflowStep.WAIT)
        if checkpoint is not None and checkpoint.finished_at is not None:
            return self._received(checkpoint)
        now = self.claim.now()
        with checkpoints.writing(self.row, self.using):
            sent = (
                events.take(self.row, event, self.using)
                if self.events is None
                else events.take_held(self.events, event, self.using)
            )
            if checkpoint is None:
                deadline = now + limit if limit is not None else None
                checkpoint = self._write(key, WorkflowStep.WAIT, now, event=event, wake_at=deadline)
            if sent is not None:
                self._finish(checkpoint, result=sent.data)
            elif checkpoint.wake_at is not None and checkpoint.wake_at <= now:
                self._finish(checkpoint, timed_out=True)
        if checkpoint.finished_at is not None:
            return self._received(checkpoint)
        early = self.events is not None and self.events_early
        raise Park(
            checkpoint.wake_at or FOREVER,
            reason=f"waits for {event!r}",
            then=None if self.locked_run else lambda: events.wake_if_sent(self.row, event, self.using),
            due_if=events.sent(self.row, event) if early else None,
        )

    def _received(self, checkpoint: WorkflowStep) -> Any:
        if checkpoint.timed_out:
            raise WaitTimeout(f"no {checkpoint.event!r} event came before the wait's timeout")
        return checkpoint.result

    # -- progress ----------------------------------------------------------------------------------

    def progress(self, fraction: float, message: str = "") -> None:
        """Say how far the workflow is (``fraction`` from 0 to 1, and a short ``message``),
        from anywhere in the method or its steps. Throttled: written at most once a second,
        at 1.0, and when the run ends; the admin shows the last value written."""
        if self._progress is None:
            self._progress = Progress(self.row, self.claim)
        self._progress.report(fraction, message)

    def end_of_run(self) -> None:
        """The run ends (returned or parked): write the progress not written yet."""
        if self._progress is not None:
            self._progress.flush()

    # -- checkpoints -----------------------------------------------------------------------------

    def _checkpoint(self, name: str, kind: str) -> WorkflowStep | None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a workflow step's name is a non-empty string, not {name!r}")
        checkpoint = self.done.get(name)
        if checkpoint is not None and checkpoint.kind != kind:
            raise ValueError(
                f"the workflow of {self.row._meta.label} pk={self.row.pk} has a {checkpoint.kind} "
                f"named {name!r} already: each step, sleep and wait needs a name of its own"
            )
        return checkpoint

    def _auto(self, prefix: str) -> str:
        """The n-th sleep (or wait for an event) of the run: ``sleep-1``, ``sleep-2``..."""
        self._counts[prefix] = self._counts.get(prefix, 0) + 1
        return f"{prefix}-{self._counts[prefix]}"

    def _write(self, name: str, kind: str, started: datetime, **values: Any) -> WorkflowStep:
        checkpoint = checkpoints.write(
            self.row,
            self.using,
            name=name,
            kind=kind,
            position=len(self.done) + 1,
            started_at=started,
            **values,
        )
        self.done[name] = checkpoint
        return checkpoint

    def _write_step(self, name: str, started: datetime, result: Any) -> None:
        """A finished step's checkpoint (statements.py, ``insert_step``: the INSERT every run
        writes, its SQL and constant parameters made once)."""
        self.done[name] = step_statements(self.using).insert_step(
            self.label, self.object_pk, name, len(self.done) + 1, started, self.claim.now(), result
        )

    def _finish(self, checkpoint: WorkflowStep, **values: Any) -> None:
        values["finished_at"] = self.claim.now()
        # By the row's key and the name (unique): a checkpoint written in this run has no pk.
        mine = WorkflowStep.objects.using(self.using).filter(
            **checkpoints.key_of(self.row), name=checkpoint.name
        )
        mine.update(**values)
        for field, value in values.items():
            setattr(checkpoint, field, value)
