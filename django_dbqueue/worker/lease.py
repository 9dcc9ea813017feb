"""The lease keeper: a daemon thread that renews the leases of the rows a worker holds,
sends the worker's heartbeats, and reports handlers that outlive their timeout.

It runs on its own database connection (Django's connections are per thread), so a renewal
never waits behind the job the worker is running.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError, connections

from ..conf import settings
from ..flow import cancellation
from ..queue.lease import Claim
from ..queue.outcome import Outcome
from ..queue.record import record, renew
from . import registry

if TYPE_CHECKING:
    from ..models import QueueMixin

logger = logging.getLogger("django_dbqueue.worker")


@dataclass
class Running:
    """The handler running now, for the timeout watch."""

    model: type[QueueMixin]
    pk: Any
    token: int
    timeout: float  # 0: none
    started: float
    finished: bool = False
    reported: bool = False
    #: Why the handler is to stop: set by the keeper when someone asked to cancel the row.
    cancelled: str | None = None


#: Called when a handler ignores its timeout: (model, pk, token, seconds).
HardTimeoutHook = Callable[[type["QueueMixin"], Any, int, float], None]


class LeaseKeeper:
    def __init__(
        self, worker_id: str, heartbeat_db: Callable[[], str | None], on_hard_timeout: HardTimeoutHook | None
    ) -> None:
        self.worker_id = worker_id
        self.heartbeat_db = heartbeat_db
        self.on_hard_timeout = on_hard_timeout
        self.running: Running | None = None
        self._held: dict[int, tuple[type[QueueMixin], Claim, set[Any]]] = {}
        self._lost: dict[int, set[Any]] = {}
        #: Every row of each held claim (by str(pk), as cancel requests name them), and
        #: those someone asked to cancel.
        self._rows: dict[int, dict[str, Any]] = {}
        self._cancelled: dict[int, set[Any]] = {}
        #: Set by the worker where it can: raises JobCancelled in the handler's thread.
        self.interrupt: Callable[[], None] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"dbqueue-keeper-{worker_id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    # -- what the worker holds ---------------------------------------------------------------

    def hold(self, model: type[QueueMixin], claim: Claim, ids: list[Any]) -> None:
        with self._lock:
            self._held[claim.token] = (model, claim, set(ids))
            self._lost[claim.token] = set()
            self._rows[claim.token] = {str(pk): pk for pk in ids}
            self._cancelled[claim.token] = set()

    def forget(self, claim: Claim, ids: list[Any]) -> None:
        with self._lock:
            entry = self._held.get(claim.token)
            if entry:
                entry[2].difference_update(ids)

    def drop(self, claim: Claim) -> None:
        with self._lock:
            self._held.pop(claim.token, None)
            self._lost.pop(claim.token, None)
            self._rows.pop(claim.token, None)
            self._cancelled.pop(claim.token, None)

    def lost_ids(self, claim: Claim) -> set[Any]:
        """The ids of a held claim found lost so far: a set this thread fills as it finds
        more, so the worker tests it once per job without the lock (a set's membership test
        and its update are each atomic)."""
        with self._lock:
            return self._lost.setdefault(claim.token, set())

    def cancelled_ids(self, claim: Claim) -> set[Any]:
        """The ids of a held claim someone asked to cancel (filled like ``lost_ids``)."""
        with self._lock:
            return self._cancelled.setdefault(claim.token, set())

    def _mark_lost(self, claim: Claim, ids: set[Any]) -> None:
        with self._lock:
            lost = self._lost.get(claim.token)
            if lost is not None:
                lost.update(ids)
            entry = self._held.get(claim.token)
            if entry:
                entry[2].difference_update(ids)

    # -- the thread --------------------------------------------------------------------------

    def _run(self) -> None:
        next_renewal: dict[int, float] = {}
        next_heartbeat = time.monotonic() + settings.HEARTBEAT_INTERVAL
        try:
            while not self._stop.wait(0.1):
                self._watch_timeout()
                now = time.monotonic()
                if now >= next_heartbeat:
                    next_heartbeat = now + settings.HEARTBEAT_INTERVAL
                    self._heartbeat()
                with self._lock:
                    held = [(m, c, list(ids)) for m, c, ids in self._held.values()]
                for model, claim, ids in held:
                    # Renew at a third of the lease: two renewals may fail before it runs out.
                    third = claim.lease.total_seconds() / 3
                    due = next_renewal.setdefault(claim.token, claim.monotonic_at + third)
                    if now >= due:
                        next_renewal[claim.token] = now + third
                        if ids:  # none left to renew in atomic mode: their row locks hold them
                            self._renew(model, claim, ids)
                        self._check_cancels(model, claim)
                live = {claim.token for _, claim, _ in held}
                for token in list(next_renewal):
                    if token not in live:
                        del next_renewal[token]
        finally:
            connections.close_all()  # this thread's own connections

    def _heartbeat(self) -> None:
        using = self.heartbeat_db()
        if using is None:
            return
        try:
            registry.heartbeat(self.worker_id, using)
        except DatabaseError as exc:
            logger.warning("heartbeat of %s failed: %s", self.worker_id, exc)
            connections.close_all()

    def _renew(self, model: type[QueueMixin], claim: Claim, ids: list[Any]) -> None:
        try:
            missing = set(ids) - renew(model, ids, claim)
            if missing:
                self._mark_lost(claim, missing)
        except DatabaseError as exc:
            logger.warning("lease renewal of %d %s row(s) failed: %s", len(ids), model._meta.label, exc)
            connections.close_all()

    def _check_cancels(self, model: type[QueueMixin], claim: Claim) -> None:
        """Read the cancel requests for ``claim`` (one indexed SELECT per renewal interval).
        Lease mode: the rows asked for end CANCELLED at once, fenced by the claim, so whatever
        their handler does next is rejected. Atomic mode: the running row is locked by the
        handler's transaction, so the worker writes the outcome once the handler stopped.
        Either way the running handler gets JobCancelled."""
        try:
            asked = cancellation.requested(model, claim.using, claim.token)
        except DatabaseError as exc:
            logger.warning("reading cancel requests of %s failed: %s", model._meta.label, exc)
            connections.close_all()
            return
        with self._lock:
            rows, done = self._rows.get(claim.token, {}), self._cancelled.get(claim.token)
            if done is None:
                return
            new = {rows[key]: by for key, by in asked.items() if key in rows and rows[key] not in done}
            if not new:
                return
            done.update(new)
            held = set(self._held[claim.token][2]) if claim.token in self._held else set()
        if not model.queue_atomic and not self._end_cancelled(model, claim, new, held):
            with self._lock:
                done.difference_update(new)  # not written: read again at the next renewal
        running = self.running
        running = running if running is not None and running.token == claim.token else None
        if running is not None and not running.finished and running.pk in new:
            running.cancelled = cancellation.reason(new[running.pk])
            if self.interrupt is not None:
                self.interrupt()

    def _end_cancelled(self, model: type[QueueMixin], claim: Claim, new: dict[Any, str], held: set) -> bool:
        """Lease mode: write CANCELLED for the requested rows still held; False if it failed."""
        for by in set(new.values()):
            ids = [pk for pk, who in new.items() if who == by and pk in held]
            try:
                why = cancellation.reason(by)
                written = record(model, claim, [Outcome.cancelled(pk, why) for pk in ids]).written
            except DatabaseError as exc:
                logger.warning("cancelling %s rows failed: %s", model._meta.label, exc)
                connections.close_all()
                return False
            if written:
                self._mark_lost(claim, written)
                logger.info("cancelled %s pk=%s on request", model._meta.label, ", ".join(map(str, written)))
        return True

    def _watch_timeout(self) -> None:
        running = self.running
        if running is None or not running.timeout or running.finished or running.reported:
            return
        overdue = time.monotonic() - running.started - running.timeout
        # The alarm raised JobTimeout at the deadline; a handler still running after this
        # grace is stuck in C code or swallowed it. Not renewing is not enough (the lease
        # would keep it), so the supervisor replaces this process.
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
        if self.on_hard_timeout is not None:
            self.on_hard_timeout(running.model, running.pk, running.token, running.timeout)
