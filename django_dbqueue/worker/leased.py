"""Lease mode (at-least-once): the handler runs first, its outcome is written after.

The successes of a claim are collected and written together, one ``record()`` (one fenced
UPDATE) per flush (``DBQUEUE_FLUSH_INTERVAL``); a failure is written when it happens. Before
each flush the connection is checked for a transaction a handler left open (a raw ``BEGIN``):
everything since would sit in it and never commit.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from django.db import connections

from ..backends import backend_for
from ..conf import settings
from ..exceptions import Park
from ..queue.outcome import Outcome
from . import leaks
from .claimed import ClaimedRows

if TYPE_CHECKING:
    from ..models import QueueMixin
    from ..queue.row import QueueRow

logger = logging.getLogger("django_dbqueue.worker")


def run_leased(claimed: ClaimedRows) -> None:
    context = claimed.context
    done: list[Outcome] = []  # successes not written yet
    lost = context.keeper.lost_ids(claimed.claim)
    flush_interval = settings.FLUSH_INTERVAL
    last_flush = time.monotonic()
    # The thread's connection object, looked up once (``connections[alias]`` is a look-up in
    # a thread-local, paid per job otherwise): a handler that closes it leaves the same object.
    connection = connections[claimed.claim.using]
    for index, row in enumerate(claimed.rows):
        if claimed.must_stop():
            claimed.give_back(claimed.rows[index:])
            break
        if lost and row.pk in lost:  # the set is filled in place: usually empty
            # Its lease ran out while this worker was held up and another worker has it
            # now: running it here would only be a duplicate.
            claimed.lost(row)
            continue
        error = context.call(row)
        leak = None if context.in_transaction else leaks.left_open(connection)
        if leak is not None:
            if not _leaked(claimed, row, leak, done, claimed.rows[index + 1 :]):
                return  # this connection is beyond use: the worker stops
            done = []
            continue
        if error is None:
            done.append(Outcome.succeeded(row))
        elif isinstance(error, Park):  # a workflow's sleep, wait, or next step: READY later
            claimed.park(row, error)
        else:
            claimed.fail(row, error)
        if time.monotonic() - last_flush >= flush_interval:
            _flush(claimed, done)
            done, last_flush = [], time.monotonic()
    _flush(claimed, done)


def _flush(claimed: ClaimedRows, done: list[Outcome]) -> None:
    """Write the successes, unless a handler among them sent a raw BEGIN: then everything
    since sits in a transaction that would never commit. It is rolled back, and the rows go
    back to be claimed one by one (a row alone takes the blame)."""
    if not done:
        return
    using = claimed.claim.using
    if claimed.context.in_transaction or not backend_for(using).server_in_transaction():
        claimed.finish(done)
        return
    connections[using].rollback()
    logger.error(
        "worker %s: a handler of %s left a transaction open (a raw BEGIN?); rolled back",
        claimed.context.worker_id,
        claimed.model._meta.label,
    )
    leak = leaks.LeakedTransaction("a handler left a transaction open (a raw BEGIN?)")
    rows = _rows_of(done)
    if len(rows) == 1:
        claimed.fail(rows[0], leak, alone=True)  # it was the one
    else:  # one of them: each runs again alone, and the one alone takes the blame
        claimed.retry_alone(rows, leak)


def _leaked(
    claimed: ClaimedRows,
    row: QueueMixin,
    leak: leaks.LeakedTransaction,
    done: list[Outcome],
    rest: list[QueueMixin],
) -> bool:
    """Fail the job that left a transaction open, and put the connection right; False if
    it cannot be: the outcomes are then written on a fresh connection and the worker stops
    (its supervisor starts a new process)."""
    logger.error("%s pk=%s: %s", claimed.model._meta.label, row.pk, leak)
    outcomes = [*done, Outcome.failed(row, leak)]
    if leaks.restore(claimed.claim.using):
        claimed.finish(outcomes)
        return True

    def write() -> None:
        claimed.finish(outcomes)
        claimed.give_back(rest)

    leaks.on_a_fresh_connection(write)
    claimed.context.stop.fatal = leak
    return False


def _rows_of(outcomes: list[Outcome]) -> list[QueueRow]:
    # The rows the worker ran, as their outcomes (values of the engine) hold them.
    return [outcome.row for outcome in outcomes if outcome.row is not None]
