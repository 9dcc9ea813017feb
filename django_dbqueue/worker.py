"""``Worker``: one process's loop of claim -> process -> record outcome.

A plain class, usable without the management command::

    Worker(models=[Order], burst=True).run()

Correctness never depends on this process staying alive: a row it claimed is RUNNING with
a lease; if the process dies, the lease runs out and any worker's rescue step puts the row
back (``QueueQuerySet.rescue_expired``). While it lives, a keeper thread renews the leases
of the rows it holds and watches for handlers that outlive their ``queue_timeout``.
"""

from __future__ import annotations

import logging
import operator
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from datetime import timedelta
from types import FrameType
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import (
    DEFAULT_DB_ALIAS,
    DatabaseError,
    InterfaceError,
    OperationalError,
    connections,
    router,
    transaction,
)
from django.db.transaction import TransactionManagementError

from . import registry, signals
from .autocommit import deferred_autocommit
from .batching import ClaimSizer
from .conf import settings
from .exceptions import JobTimeout, LeaseLost
from .models import QueueMixin, queue_models, record_successes, successes_written
from .pipeline import CarriedCommit, CommitCarrier
from .query import Claim, QueueQuerySet, as_timedelta, default_worker_id, is_transient_lock_error
from .savepoint import LazySavepoint
from .wakeup import Listener

logger = logging.getLogger("django_dbqueue.worker")

#: Called by the keeper thread when a handler ignores its timeout (model, pk, token, seconds).
HardTimeoutHook = Callable[[type[QueueMixin], Any, int, float], None]


@dataclass
class WorkerStats:
    claimed: int = 0
    succeeded: int = 0
    failed: int = 0  # failed attempts, retried or not
    released: int = 0
    lost: int = 0  # outcomes rejected because the claim was lost
    rescued: int = 0

    @property
    def processed(self) -> int:
        return self.succeeded + self.failed

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class Worker:
    def __init__(
        self,
        *,
        models: Sequence[type[QueueMixin]] | None = None,
        batch_size: int | None = None,
        burst: bool = False,
        max_jobs: int | None = None,
        poll_interval: float | None = None,
        lease: float | timedelta | None = None,
        worker_id: str | None = None,
        database: str | None = None,
        queues: Sequence[str] | None = None,
        handle_signals: bool = True,
        on_hard_timeout: HardTimeoutHook | None = None,
        parent_pid: int | None = None,
    ) -> None:
        self.models = list(models) if models else queue_models()
        if not self.models:
            raise ImproperlyConfigured("no QueueMixin models are installed: nothing to consume")
        # None: per model (batching.ClaimSizer, after a first claim of default_batch_size()).
        self.batch_size = batch_size
        self.burst = burst
        self.max_jobs = max_jobs
        self.poll_interval = poll_interval if poll_interval is not None else settings.POLL_INTERVAL
        self.lease = as_timedelta(lease, "lease") if lease is not None else None
        self.worker_id = worker_id or default_worker_id()
        self.database = database
        self.queues = list(queues) if queues else None
        if self.queues:
            # Only models with a `queue` column (Message, the django.tasks records) have queues.
            self.models = [m for m in self.models if has_queue_column(m)]
            if not self.models:
                raise ImproperlyConfigured(
                    "--queue needs a model with a 'queue' column, e.g. django_dbqueue.Message"
                )
        self.handle_signals = handle_signals
        self.on_hard_timeout = on_hard_timeout
        self.parent_pid = parent_pid
        self.stats = WorkerStats()
        self._stopping = threading.Event()
        # Set by stop() and, on PostgreSQL, by a NOTIFY for one of our tables.
        self._wake = threading.Event()
        self._listener: Listener | None = None
        self._keeper = _LeaseKeeper(self)
        self._current: _Running | None = None
        self._fatal: BaseException | None = None
        self._next_rescue = 0.0
        self._alarm_installed = False
        self._registry_db: str | None = None
        self._carriers: dict[str, CommitCarrier] = {}
        self._sizer = ClaimSizer()

    # -- public control --------------------------------------------------------------------

    def stop(self) -> None:
        """Stop claiming; the running job finishes, unstarted claimed rows are given back."""
        self._stopping.set()
        self._wake.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def db_for(self, model: type[QueueMixin]) -> str:
        return self.database or router.db_for_write(model) or DEFAULT_DB_ALIAS

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> WorkerStats:
        restore = self._install_signals()
        self._keeper.start()
        stack = ExitStack()
        try:
            check_tables(self.models, self.database)
            self._registry_db = self.db_for(self.models[0])
            registry.register(self.worker_id, self.models, self._registry_db)
            self._start_listener()
            # Claims, outcomes and atomic jobs are back-to-back transactions on this thread's
            # connections: on MySQL, skip the SET autocommit round trips between them.
            for using in sorted({self.db_for(model) for model in self.models}):
                stack.enter_context(deferred_autocommit(using))
                if CommitCarrier.supported(using) and any(m.queue_atomic for m in self.models):
                    # MariaDB: an atomic job's outcome, commit and the next job's lock in one
                    # round trip (see pipeline.py).
                    self._carriers[using] = stack.enter_context(CommitCarrier(using).active())
            logger.info(
                "worker %s consuming %s%s",
                self.worker_id,
                ", ".join(f"{m._meta.label} (batch {self._batch_description(m)})" for m in self.models),
                ", burst" if self.burst else "",
            )
            self._loop()
        finally:
            stack.close()
            self._carriers.clear()
            self._keeper.stop()
            if self._listener is not None:
                self._listener.stop()
            if restore:
                restore()
            if self._registry_db:
                registry.unregister(self.worker_id, self._registry_db)
            connections.close_all()
        if self._fatal is not None:
            logger.error("worker %s stopped: a handler raised %r", self.worker_id, self._fatal)
        logger.info("worker %s done: %s", self.worker_id, self.stats.as_dict())
        return self.stats

    def _loop(self) -> None:
        idle_sleep = self._min_sleep()
        # Remember which models had work, so a busy model is claimed without a probe first.
        busy = dict.fromkeys(self.models, True)
        db_failures = 0
        while not self.stopping:
            if self.parent_pid is not None and os.getppid() != self.parent_pid:
                logger.warning("worker %s: supervisor is gone, stopping", self.worker_id)
                break
            try:
                self._maybe_rescue()
                did_work = False
                for model in self.models:
                    if self.stopping or self._quota_left() == 0:
                        break
                    qs = model.queue_queryset(self.db_for(model))
                    if self.queues:
                        qs = qs.filter(queue__in=self.queues)
                    if not busy[model] and not qs.has_ready():
                        continue
                    rows = qs.claim(
                        self._claim_size(model), self.worker_id, self.lease or model.queue_lease_seconds()
                    )
                    busy[model] = bool(rows)
                    if rows:
                        did_work = True
                        self._process_batch(model, rows)
                db_failures = 0
            except (OperationalError, InterfaceError) as exc:
                # The database went away (restart, killed session, network): rows this
                # worker held come back through their leases; reconnect with backoff.
                db_failures += 1
                pause = min(0.25 * 2**db_failures, 10.0)
                logger.warning(
                    "worker %s: database error (%s); reconnecting in %.1fs", self.worker_id, exc, pause
                )
                self._close_connections()
                self._stopping.wait(pause)
                self._check_tables_after_error()
                continue
            if self._quota_left() == 0 or self._fatal is not None:
                break
            if did_work:
                idle_sleep = self._min_sleep()
                continue
            if self.burst:
                break
            if self._wake.wait(idle_sleep):
                self._wake.clear()
                idle_sleep = self._min_sleep()
                busy = dict.fromkeys(self.models, True)
                continue
            idle_sleep = min(idle_sleep * 2, self._idle_ceiling())

    def _idle_ceiling(self) -> float:
        # With LISTEN, notifications wake us; polling only catches what sends none (rows
        # that come due later, bulk_create): a slower safety net costs the database less.
        listening = self._listener is not None and self._listener.listening.is_set()
        return max(self.poll_interval, 1.0) if listening else self.poll_interval

    def _start_listener(self) -> None:
        databases = {self.db_for(model) for model in self.models}
        if self.burst or len(databases) != 1:
            return
        [using] = databases
        if Listener.supported(using):
            self._listener = Listener(using, [m._meta.db_table for m in self.models], self._wake)
            self._listener.start()

    def _min_sleep(self) -> float:
        return max(self.poll_interval / 8, 0.005)

    def _quota_left(self) -> int | None:
        if self.max_jobs is None:
            return None
        return max(self.max_jobs - self.stats.processed - self.stats.lost, 0)

    def _batch_description(self, model: type[QueueMixin]) -> str:
        if self.batch_size:
            return str(self.batch_size)
        return f"{default_batch_size(model)} first, then by job time up to {settings.BATCH_SIZE}"

    def _claim_size(self, model: type[QueueMixin]) -> int:
        size = self.batch_size or self._sizer.size(model, default_batch_size(model), atomic_group(model))
        left = self._quota_left()
        return size if left is None else min(size, left)

    def _maybe_rescue(self) -> None:
        now = time.monotonic()
        if now < self._next_rescue:
            return
        self._next_rescue = now + settings.RESCUE_INTERVAL
        for model in self.models:
            self.stats.rescued += model.queue_queryset(self.db_for(model)).rescue_expired()

    def _check_tables_after_error(self) -> None:
        """A queue table that is gone is a setup error, not an outage (SQLite reports it as
        an OperationalError): raise ImproperlyConfigured instead of reconnecting forever."""
        try:
            check_tables(self.models, self.database)
        except (OperationalError, InterfaceError):
            pass  # the database is still unreachable: keep waiting for it

    @staticmethod
    def _close_connections() -> None:
        for conn in connections.all(initialized_only=True):
            try:
                conn.close()
            except DatabaseError:
                pass

    # -- one batch -------------------------------------------------------------------------

    def _process_batch(self, model: type[QueueMixin], rows: list[QueueMixin]) -> None:
        claim: Claim = rows[0]._queue_claim
        self.stats.claimed += len(rows)
        signals.job_claimed.send(model, rows=rows, worker_id=self.worker_id)
        self._keeper.hold(model, claim, _pks(model, rows))
        started = time.monotonic()
        try:
            if model.queue_atomic:
                self._run_atomic(model, rows, claim)
            else:
                self._run_leased(model, rows, claim)
        finally:
            self._keeper.drop(claim)
        if not self.stopping:  # a batch cut short says nothing of how long its jobs take
            self._sizer.observe(model, len(rows), time.monotonic() - started)

    def _run_leased(self, model: type[QueueMixin], rows: list[QueueMixin], claim: Claim) -> None:
        """At-least-once: handler first, outcome after; successes are written in batches."""
        # This loop runs once per job: what does not change within a batch is looked up once.
        done: list[QueueMixin] = []
        flush_interval = settings.FLUSH_INTERVAL
        stopping = self._stopping.is_set
        lost = self._keeper.lost_ids(claim)
        pk_of = operator.attrgetter(model._meta.pk.attname)
        call = self._call
        monotonic = time.monotonic
        last_flush = monotonic()
        for index, row in enumerate(rows):
            if stopping() or self._fatal is not None:
                self._release(model, rows[index:], claim)
                break
            if lost and pk_of(row) in lost:
                # Its lease ran out while we were held up (a stall, a frozen process) and
                # another worker has it now: running it here would only be a duplicate.
                self._lost(row, claim)
                continue
            error = call(row, claim)
            if error is None:
                done.append(row)
            else:
                self._fail(row, error, claim)
            if monotonic() - last_flush >= flush_interval:
                self._flush(model, done, claim)
                done, last_flush = [], monotonic()
        self._flush(model, done, claim)

    def _run_atomic(self, model: type[QueueMixin], rows: list[QueueMixin], claim: Claim) -> None:
        """Exactly-once database effects: each handler runs in the transaction that records
        its outcome (fenced by the claim's token), one job or one group per commit."""
        group = atomic_group(model)
        carrier = self._carriers.get(claim.using)
        qs = model.queue_queryset(claim.using)
        for start in range(0, len(rows), group):
            if self.stopping or self._fatal is not None:
                self._release(model, rows[start:], claim)
                return
            chunk = rows[start : start + group]
            if len(chunk) == 1:
                following = rows[start + 1].pk if carrier is not None and start + 1 < len(rows) else None
                self._run_atomic_one(model, chunk[0], claim, carrier, following, qs)
            else:
                self._run_atomic_group(model, chunk, claim)

    def _run_atomic_one(
        self,
        model: type[QueueMixin],
        row: QueueMixin,
        claim: Claim,
        carrier: CommitCarrier | None = None,
        following: Any = None,
        qs: QueueQuerySet | None = None,
    ) -> None:
        """One job, one transaction: lock the row if still ours (fenced by its token, so a
        rescuer's SKIP LOCKED passes it by even once the lease ran out), run the handler,
        record the success. A failing handler rolls back alone and its failure is recorded
        right after (the row is still ours).

        With a ``carrier`` (MariaDB), the success, the commit and the lock of the
        ``following`` row go in one block at the commit, and this job's own lock may have
        come with the previous job's block."""
        using = claim.using
        qs = qs if qs is not None else model.queue_queryset(using)
        error: BaseException | None = None
        lost: list[QueueMixin] = []
        carried: CarriedCommit | None = None
        try:
            with transaction.atomic(using=using):
                held = carrier is not None and carrier.holds(row.pk)
                if not held and not qs._lock_held([row.pk], claim):
                    self._lost(row, claim)
                    return
                error = self._call(row, claim)
                if error is not None:
                    transaction.set_rollback(True, using=using)
                elif carrier is not None and (carried := qs._success_commit(row, claim, following)):
                    carrier.carry(carried)
                else:
                    # Lost only if the handler deleted its own row: what it did commits.
                    lost = record_successes(model, [row], claim)
        except DatabaseError as exc:
            error = self._rolled_back(model, exc, using)
        finally:
            if carrier is not None:
                carrier.clear()
        if carried is not None and error is None:
            if carried.sent:
                lost = self._carried_outcome(model, row, claim, carried)
            else:
                # The handler left the transaction marked for rollback (set_rollback(True), or
                # a database error it caught in atomic(savepoint=False)), so Django rolled it
                # back instead of committing: a failed attempt, as on the path without a carrier.
                error = self._rolled_back(
                    model,
                    TransactionManagementError("the handler left its transaction marked for rollback"),
                    using,
                )
        if error is not None:
            self._fail(row, error, claim)
        elif lost:
            self.stats.lost += 1
        else:
            self.stats.succeeded += 1

    def _carried_outcome(
        self, model: type[QueueMixin], row: QueueMixin, claim: Claim, carried: CarriedCommit
    ) -> list[QueueMixin]:
        """What became of a success the commit carried: the rows lost (see
        ``successes_written``)."""
        written = carried.written
        if written is None:  # the block's count could not tell (no history, next row lost)
            written = bool(model.queue_queryset(claim.using)._written([row.pk], claim, carried.finished_at))
        return successes_written(model, [row], {row.pk} if written else set(), claim, carried.finished_at)

    def _run_atomic_group(self, model: type[QueueMixin], chunk: list[QueueMixin], claim: Claim) -> None:
        """Several jobs, one transaction: lock the rows still ours first (their effects commit
        together, so none may be lost half-way), then each handler behind a savepoint (sent
        only if the handler touches the database), so a failing one rolls back alone, with
        its on_commit() hooks; its failure is written in the same transaction."""
        using = claim.using
        done: list[QueueMixin] = []
        failed = lost_in_group = 0
        lost_ids: set[Any] = set()
        try:
            with transaction.atomic(using=using):
                held = model.queue_queryset(using)._lock_held([r.pk for r in chunk], claim)
                for row in chunk:
                    if row.pk not in held:
                        self._lost(row, claim)
                        lost_ids.add(row.pk)
                        continue
                    with LazySavepoint(using) as savepoint:
                        error = self._call(row, claim)
                    if error is None:
                        done.append(row)
                    else:
                        savepoint.rollback()
                        try:
                            row.mark_failed(error)
                            failed += 1
                        except LeaseLost:  # cannot happen while we hold its lock; counted if it does
                            lost_in_group += 1
                lost_in_group += len(record_successes(model, done, claim))
        except DatabaseError as exc:
            # Nothing of the group committed, the failures written inside it neither.
            error = self._rolled_back(model, exc, using)
            for row in chunk:
                if row.pk not in lost_ids:
                    self._fail(row, error, claim)
        else:
            self.stats.succeeded += len(done) - lost_in_group
            self.stats.failed += failed
            self.stats.lost += lost_in_group
            self._keeper.forget(claim, [r.pk for r in chunk])

    def _rolled_back(self, model: type[QueueMixin], exc: DatabaseError, using: str) -> DatabaseError:
        """The transaction of an atomic job or group failed as a whole: a deadlock or lock-wait
        timeout in a handler's writes, or e.g. a deferred constraint failing at commit. Each of
        its jobs gets a failed attempt, retried by the policy. A lost connection is not a
        handler's failure: it goes up (nothing committed; the leases bring the rows back)."""
        if isinstance(exc, InterfaceError) or (
            isinstance(exc, OperationalError) and not is_transient_lock_error(exc, using)
        ):
            raise exc
        logger.warning(
            "worker %s: atomic transaction of %s rolled back: %s", self.worker_id, model._meta.label, exc
        )
        return exc

    def _call(self, row: QueueMixin, claim: Claim) -> BaseException | None:
        """Run one handler; return what it raised (None on success)."""
        timeout = type(row).queue_timeout
        if not timeout:
            # No deadline to enforce: nothing for the alarm or the keeper's watchdog to see.
            try:
                row.process()
                return None
            except Exception as exc:  # noqa: BLE001 - any handler error is a failed attempt
                return exc
            except BaseException as exc:  # noqa: BLE001 - as below: a failed attempt, then stop
                self._fatal = exc
                return exc
        running = _Running(type(row), row.pk, claim.token, timeout, time.monotonic())
        self._current = running
        use_alarm = self._alarm_installed
        try:
            if use_alarm:
                signal.setitimer(signal.ITIMER_REAL, float(timeout))
            row.process()
            return None
        except JobTimeout as exc:
            return exc
        except Exception as exc:  # noqa: BLE001 - any handler error is a failed attempt
            return exc
        except BaseException as exc:  # noqa: BLE001 - SystemExit, KeyboardInterrupt raised by a handler
            # Record it as a failed attempt like any other, then stop this worker: the
            # handler asked the process to exit, and the supervisor decides what follows.
            self._fatal = exc
            return exc
        finally:
            running.finished = True
            if use_alarm:
                signal.setitimer(signal.ITIMER_REAL, 0)
            self._current = None

    def _flush(self, model: type[QueueMixin], done: list[QueueMixin], claim: Claim) -> None:
        if not done:
            return
        lost = record_successes(model, done, claim)
        self._keeper.forget(claim, _pks(model, done))
        self.stats.succeeded += len(done) - len(lost)
        self.stats.lost += len(lost)

    def _fail(self, row: QueueMixin, error: BaseException, claim: Claim) -> None:
        try:
            row.mark_failed(error)
            self.stats.failed += 1
        except LeaseLost:
            self.stats.lost += 1
        self._keeper.forget(claim, [row.pk])

    def _lost(self, row: QueueMixin, claim: Claim) -> None:
        logger.warning(
            "%s pk=%s is no longer held by worker %s (lease lost); skipped",
            row._meta.label,
            row.pk,
            self.worker_id,
        )
        self.stats.lost += 1

    def _release(self, model: type[QueueMixin], rows: list[QueueMixin], claim: Claim) -> None:
        if not rows:
            return
        released = model.queue_queryset(claim.using)._record_release([r.pk for r in rows], claim)
        self.stats.released += released
        logger.info("worker %s gave back %d unstarted %s row(s)", self.worker_id, released, model._meta.label)

    # -- signals ---------------------------------------------------------------------------

    def _install_signals(self) -> Callable[[], None] | None:
        """SIGALRM enforces ``queue_timeout``; SIGTERM/SIGINT stop gracefully when
        ``handle_signals``. Signals can only be handled in the main thread; elsewhere the
        keeper thread's watchdog is the only timeout."""
        if threading.current_thread() is not threading.main_thread():
            return None
        handled = (
            (signal.SIGTERM, signal.SIGINT, signal.SIGALRM) if self.handle_signals else (signal.SIGALRM,)
        )
        previous = {sig: signal.getsignal(sig) for sig in handled}

        def on_stop(signum: int, frame: FrameType | None) -> None:
            if self.stopping:
                logger.warning("worker %s: second signal, exiting now", self.worker_id)
                os._exit(128 + signum)
            logger.info(
                "worker %s: %s received, finishing the current job (signal again to exit now)",
                self.worker_id,
                signal.Signals(signum).name,
            )
            self.stop()

        def on_alarm(signum: int, frame: FrameType | None) -> None:
            running = self._current
            if running is not None and not running.finished:
                raise JobTimeout(f"timed out after {running.timeout:g} s")

        if self.handle_signals:
            signal.signal(signal.SIGTERM, on_stop)
            signal.signal(signal.SIGINT, on_stop)
        signal.signal(signal.SIGALRM, on_alarm)
        self._alarm_installed = True

        def restore() -> None:
            self._alarm_installed = False
            for sig, handler in previous.items():
                signal.signal(sig, handler)

        return restore


@dataclass
class _Running:
    model: type[QueueMixin]
    pk: Any
    token: int
    timeout: float | None
    started: float
    finished: bool = False
    reported: bool = False


class _LeaseKeeper:
    """A daemon thread: renews the leases of held rows, and watches handler timeouts."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self._held: dict[int, tuple[type[QueueMixin], Claim, set[Any]]] = {}
        self._lost: dict[int, set[Any]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"dbqueue-keeper-{worker.worker_id}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def hold(self, model: type[QueueMixin], claim: Claim, ids: list[Any]) -> None:
        with self._lock:
            self._held[claim.token] = (model, claim, set(ids))
            self._lost[claim.token] = set()

    def forget(self, claim: Claim, ids: list[Any]) -> None:
        with self._lock:
            entry = self._held.get(claim.token)
            if entry:
                entry[2].difference_update(ids)

    def drop(self, claim: Claim) -> None:
        with self._lock:
            self._held.pop(claim.token, None)
            self._lost.pop(claim.token, None)

    def lost(self, claim: Claim, ids: set[Any]) -> None:
        """Rows of this claim that were rescued and taken by someone else."""
        if ids:
            with self._lock:
                lost = self._lost.get(claim.token)
                if lost is not None:
                    lost.update(ids)
                entry = self._held.get(claim.token)
                if entry:
                    entry[2].difference_update(ids)

    def lost_ids(self, claim: Claim) -> set[Any]:
        """The ids of this held claim found lost so far: a set this thread fills as it finds
        more, so the worker reads it once per batch and tests it once per job without the
        lock (a set's membership test and its update are each atomic)."""
        with self._lock:
            return self._lost.setdefault(claim.token, set())

    def _run(self) -> None:
        next_renewal: dict[int, float] = {}
        next_heartbeat = time.monotonic() + settings.HEARTBEAT_INTERVAL
        try:
            while not self._stop.wait(0.1):
                self._watch_timeout()
                now = time.monotonic()
                if now >= next_heartbeat and self.worker._registry_db:
                    next_heartbeat = now + settings.HEARTBEAT_INTERVAL
                    try:
                        registry.heartbeat(self.worker.worker_id, self.worker._registry_db)
                    except DatabaseError as exc:
                        logger.warning("heartbeat of %s failed: %s", self.worker.worker_id, exc)
                        self.worker._close_connections()
                with self._lock:
                    held = [(m, c, list(ids)) for m, c, ids in self._held.values() if ids]
                for model, claim, ids in held:
                    # Renew at a third of the lease: two renewals may fail before it runs out.
                    due = next_renewal.setdefault(
                        claim.token, claim.monotonic_at + claim.lease.total_seconds() / 3
                    )
                    if now < due:
                        continue
                    next_renewal[claim.token] = now + claim.lease.total_seconds() / 3
                    try:
                        qs = model.queue_queryset(claim.using)
                        missing = set(ids) - qs._renew(ids, claim)
                        if missing:
                            # Renewal skips rows locked this instant (an admin's bulk update);
                            # only those no longer carrying our token are really gone.
                            mine = set(qs._fenced(missing, claim.token).values_list("pk", flat=True))
                            self.lost(claim, missing - mine)
                    except DatabaseError as exc:
                        logger.warning(
                            "lease renewal of %d %s row(s) failed: %s", len(ids), model._meta.label, exc
                        )
                        self.worker._close_connections()
                live = {c.token for _, c, _ in held}
                for token in list(next_renewal):
                    if token not in live:
                        del next_renewal[token]
        finally:
            connections.close_all()

    def _watch_timeout(self) -> None:
        running = self.worker._current
        if running is None or running.finished or running.reported or not running.timeout:
            return
        overdue = time.monotonic() - running.started - running.timeout
        # The alarm raised JobTimeout at the deadline; a handler still running after this
        # grace is stuck in C code or swallowed it. Stop renewing is not enough (the lease
        # would keep it), so hand it to the supervisor, which replaces this process.
        if overdue < max(2.0, running.timeout * 0.5):
            return
        running.reported = True
        logger.error(
            "%s pk=%s ignored its timeout of %g s (still running %.1f s later)",
            running.model._meta.label,
            running.pk,
            running.timeout,
            overdue,
        )
        if self.worker.on_hard_timeout is not None:
            self.worker.on_hard_timeout(running.model, running.pk, running.token, running.timeout)


def _pks(model: type[QueueMixin], rows: Sequence[QueueMixin]) -> list[Any]:
    # The attribute itself: ``row.pk`` is a property that looks the name up for every row.
    return list(map(operator.attrgetter(model._meta.pk.attname), rows))


def check_tables(models: Sequence[type[QueueMixin]], database: str | None = None) -> None:
    """Fail fast, with the fix in the message, when a queue table (or one of the tables this
    app writes beside it) was never migrated."""
    from .history import QueueAttempt, history_enabled
    from .registry import WorkerProcess

    needed: list[type] = [*models, WorkerProcess]
    if any(history_enabled(model) for model in models):
        needed.append(QueueAttempt)
    for model in needed:
        using = database or router.db_for_write(model) or DEFAULT_DB_ALIAS
        if model._meta.db_table not in connections[using].introspection.table_names():
            raise ImproperlyConfigured(
                f"the table {model._meta.db_table!r} of {model._meta.label} does not exist "
                f"in database {using!r}: run 'manage.py migrate'"
            )


def has_queue_column(model: type[QueueMixin]) -> bool:
    return any(f.name == "queue" for f in model._meta.concrete_fields)


def atomic_group(model: type[QueueMixin]) -> int:
    """Jobs per transaction in atomic mode (``queue_atomic_group``); 1 in lease mode."""
    return max(int(getattr(model, "queue_atomic_group", 1) or 1), 1) if model.queue_atomic else 1


#: The first claim of a lease-mode model, before its jobs were timed (DBQUEUE_BATCH_SIZE
#: if smaller). Later claims take as many rows as fit in DBQUEUE_BATCH_SECONDS, up to
#: DBQUEUE_BATCH_SIZE: for fast jobs the claim's locking scan is the larger cost per job, and
#: it is paid once per claim.
FIRST_LEASE_CLAIM = 100


def default_batch_size(model: type[QueueMixin]) -> int:
    """Rows claimed at once when --batch-size is not given, until the worker has timed a batch
    of the model (then batching.ClaimSizer decides).

    Lease mode writes a batch's successes in one statement, so big batches pay; still, until
    the jobs were timed, it claims no more than FIRST_LEASE_CLAIM rows. An atomic model's jobs
    may be slow (they hold a transaction each): its first claim is small, so one worker does
    not sit on rows that idle workers could run."""
    if model.queue_atomic:
        return max(10, atomic_group(model))
    return min(settings.BATCH_SIZE, FIRST_LEASE_CLAIM)
