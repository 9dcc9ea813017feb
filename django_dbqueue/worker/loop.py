"""``Worker``: one process's loop of claim -> process -> record outcome.

A plain class, usable without the management command: ``Worker(models=[Order]).run()``.

Correctness never depends on this process staying alive: a row it claimed is RUNNING with a
lease; if the process dies, the lease runs out and any worker's rescue puts the row back.
While it lives, its lease keeper renews the leases of the rows it holds; its ticker fires
due schedules. Run inside a transaction (a ``TestCase``), the worker uses that transaction's
connection and leaves it open: no keeper or ticker thread, no listener, no closing.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import timedelta

from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections, router

from .. import signals
from ..conf import settings
from ..flow.limits import limits_of
from ..models import QueueMixin, queue_models
from ..observability import traces
from ..queue.lease import as_timedelta, default_worker_id
from . import leaks, registry
from .calls import HandlerCall
from .claimed import ExecutionContext
from .executor import execute
from .idle import IdleTransactionGuard
from .lease import HardTimeoutHook, LeaseKeeper
from .outage import Outages
from .pacing import IdlePacing
from .shutdown import install_signals
from .sizing import ClaimSizer, atomic_group, default_batch_size
from .stats import WorkerStats
from .stop import StopFlag
from .tables import check_tables, has_queue_column
from .ticker import Ticker
from .wakeup import Listener

logger = logging.getLogger("django_dbqueue.worker")


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
        stop_signals: Sequence[int] = (signal.SIGTERM, signal.SIGINT),
        on_hard_timeout: HardTimeoutHook | None = None,
        on_claim: Callable[[type[QueueMixin], int, bool], None] | None = None,
        schedules: bool = True,
    ) -> None:
        self.models = list(models) if models else queue_models()
        if not self.models:
            raise ImproperlyConfigured("no QueueMixin models are installed: nothing to consume")
        self.batch_size = batch_size  # None: per model, by ClaimSizer
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
        self.stop_signals = tuple(stop_signals) if handle_signals else ()
        #: Told (model, token, True) when a claim is taken and (..., False) when it is done
        #: with: the supervisor knows which rows a worker that dies held.
        self.on_claim = on_claim or (lambda model, token, held: None)
        self.stats = WorkerStats()
        self._wake = threading.Event()  # set by stop() and by a notification
        self.stop_flag = StopFlag(self._wake)
        self._listener: Listener | None = None
        self._registry_db: str | None = None
        self.keeper = LeaseKeeper(self.worker_id, lambda: self._registry_db, on_hard_timeout)
        self.call = HandlerCall(self.keeper, self.stop_flag)
        self.ticker = Ticker(self.worker_id, database, enabled=schedules)
        self._next_rescue = 0.0
        self._sizer = ClaimSizer()
        self._pacing = IdlePacing(self.poll_interval, self._listening)
        #: Inside a caller's transaction (a TestCase): see the module's docstring.
        self.in_transaction = False
        #: What running a claim's rows and riding out an outage take from this worker (their
        #: ``in_transaction`` is set by ``run()``).
        self.execution = ExecutionContext(self.worker_id, self.call, self.keeper, self.stats, self.stop_flag)
        self.outages = Outages(self.worker_id, self.models, database, self.databases(), self.stop_flag)

    # -- control -----------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop claiming; the running job finishes, unstarted claimed rows are given back."""
        self.stop_flag.stop()

    @property
    def stopping(self) -> bool:
        return self.stop_flag.stopping

    @property
    def fatal(self) -> BaseException | None:
        """What a handler raised that stopped this worker (see ``stop``), if anything did."""
        return self.stop_flag.fatal

    def db_for(self, model: type[QueueMixin]) -> str:
        return self.database or router.db_for_write(model) or DEFAULT_DB_ALIAS

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> WorkerStats:
        databases = sorted({self.db_for(model) for model in self.models})
        self.in_transaction = any(connections[using].in_atomic_block for using in databases)
        self.execution = replace(self.execution, in_transaction=self.in_transaction)
        self.outages = replace(self.outages, in_transaction=self.in_transaction)
        restore = None
        if threading.current_thread() is threading.main_thread():
            restore = install_signals(self.worker_id, self.stop_signals, self.stop_flag, self.call)
        guard = IdleTransactionGuard.for_models(self.models, self.db_for, self.lease, self.in_transaction)
        try:
            guard.install()
            check_tables(self.models, self.database)
            self._registry_db = self.db_for(self.models[0])
            self._register()
            if not self.in_transaction:
                self.keeper.start()
                self._start_listener(databases)
                self.ticker.start(burst=self.burst)
            labels = ", ".join(m._meta.label for m in self.models)
            logger.info("worker %s consuming %s%s", self.worker_id, labels, ", burst" if self.burst else "")
            self._loop()
        finally:
            guard.uninstall()
            self.keeper.stop()
            self.ticker.stop()
            if self._listener is not None:
                self._listener.stop()
            if restore:
                restore()
            if self._registry_db:
                using = self._registry_db
                if isinstance(self.fatal, leaks.LeakedTransaction):  # this thread's connection is gone
                    leaks.on_a_fresh_connection(lambda: registry.unregister(self.worker_id, using))
                else:
                    registry.unregister(self.worker_id, using)
            if not self.in_transaction:
                connections.close_all()
        if self.fatal is not None:
            logger.error("worker %s stopped: a handler raised %r", self.worker_id, self.fatal)
        logger.info("worker %s done: %s", self.worker_id, self.stats.as_dict())
        return self.stats

    def _loop(self) -> None:
        busy = dict.fromkeys(self.models, True)  # a busy model is claimed without a probe first
        db_failures = 0
        while not self.stopping:
            try:
                self._maybe_rescue()
                did_work = held = False  # held: ready rows a limit kept back (burst waits for them)
                for model in self.models:
                    if self.stopping or self.fatal is not None or self._quota_left() == 0:
                        break
                    qs = model.queue_queryset(self.db_for(model))
                    if self.queues:
                        qs = qs.filter(queue__in=self.queues)
                    if not busy[model] and not qs.has_ready():
                        continue
                    with traces.claim_span(model, self.worker_id) as taken:
                        lease = self.lease or model.queue_lease_seconds()
                        rows = qs.claim(self._claim_size(model), self.worker_id, lease)
                        taken[0] = len(rows)
                    busy[model] = bool(rows)
                    held = held or (not rows and limits_of(model) is not None and qs.has_ready())
                    if rows:
                        did_work = True
                        self._run_claim(model, rows)
                db_failures = 0
            except DatabaseError as exc:
                db_failures += 1
                if not self.outages.ride_out(exc, db_failures):
                    raise
                continue
            if self._quota_left() == 0 or self.fatal is not None:
                break
            if did_work:
                self._pacing.worked()
                continue
            if self.burst and not held:
                break
            if self._wake.wait(self._pacing.next_wait()):
                self._wake.clear()
                self._pacing.woken()
                busy = dict.fromkeys(self.models, True)

    def _run_claim(self, model: type[QueueMixin], rows: list[QueueMixin]) -> None:
        claim = rows[0].queue_claim()
        self.stats.claimed += len(rows)
        signals.job_claimed.send(model, rows=rows, worker_id=self.worker_id)
        self.keeper.hold(model, claim, [row.pk for row in rows])
        self.on_claim(model, claim.token, True)
        self.call.for_claim()
        started = time.monotonic()
        try:
            execute(self.execution, model, rows, claim)
        finally:
            self.keeper.drop(claim)
            self.on_claim(model, claim.token, False)
        if not self.stopping:  # a claim cut short says nothing of how long its jobs take
            self._sizer.observe(model, len(rows), time.monotonic() - started)

    def _register(self) -> None:
        """Join the WorkerProcess table; a database that is down or read-only is waited for."""
        failures = 0
        while not self.stopping:
            try:
                registry.register(self.worker_id, self.models, self._registry_db or "default")
                return
            except DatabaseError as exc:
                failures += 1
                if not self.outages.ride_out(exc, failures):
                    raise

    def databases(self) -> list[str]:
        return sorted({self.db_for(model) for model in self.models})

    # -- pacing ------------------------------------------------------------------------------

    def _listening(self) -> bool:
        return self._listener is not None and self._listener.listening.is_set()

    def _start_listener(self, databases: list[str]) -> None:
        if self.burst or len(databases) != 1 or not Listener.supported(databases[0]):
            return
        self._listener = Listener(databases[0], [m._meta.db_table for m in self.models], self._wake)
        self._listener.start()

    def _quota_left(self) -> int | None:
        if self.max_jobs is None:
            return None
        return max(self.max_jobs - self.stats.processed - self.stats.lost, 0)

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
