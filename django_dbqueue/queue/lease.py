"""A claim's lease: what a worker holds for the rows it took in one claim.

Every outcome is fenced by the claim's token (``queue_token``): a row claimed again gets a
fresh one, so a worker that lost its claim can never write over the new holder's.
"""

from __future__ import annotations

import math
import os
import secrets
import socket
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

#: The token of a READY row whose claim ended in a crash (its worker died, its lease ran out):
#: claims take such a row alone, so a row that kills its worker ("a poison row") takes down
#: nobody else's attempts, and is charged for its own (see rescue.py).
RUN_ALONE = 0

#: The time columns a claim's UPDATE writes from the claim's own values (``Claim.times()``).
CLAIM_TIMES = ("queue_last_attempt_at", "queue_locked_until")


def new_token() -> int:
    """A fresh claim token: random and positive (an outcome stores it negated, a rescue
    clears it), so a row re-claimed by the same worker never matches its old claim."""
    return secrets.randbits(62) + 1


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def as_timedelta(value: float | int | timedelta, what: str = "duration") -> timedelta:
    """Seconds or a timedelta as a positive, finite timedelta (a clear error otherwise)."""
    if isinstance(value, timedelta):
        delta = value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ValueError(f"{what} must be a finite number of seconds, got {value!r}")
        try:
            delta = timedelta(seconds=value)
        except OverflowError:
            raise ValueError(f"{what} is out of range: {value!r} seconds") from None
    else:
        raise TypeError(f"{what} must be seconds (int/float) or a timedelta, not {value!r}")
    if delta <= timedelta(0):
        raise ValueError(f"{what} must be positive, got {value!r}")
    return delta


@dataclass
class Claim:
    """The rows a worker took in one claim statement share one of these."""

    token: int
    worker_id: str
    lease: timedelta
    using: str
    #: The database's clock at the claim, and this process's monotonic clock at that moment:
    #: outcome times come from the database's clock without a round trip each.
    claimed_at: datetime
    monotonic_at: float = field(default_factory=time.monotonic)

    def now(self) -> datetime:
        """The database's time now, estimated from the claim."""
        return self.claimed_at + timedelta(seconds=time.monotonic() - self.monotonic_at)

    def times(self) -> dict[str, datetime]:
        """The times the claim's UPDATE writes on its rows (the database's clock at the claim,
        and that plus the lease): the row loader gives them to the instances as written
        instead of reading them back (see ``queue/loading.py``)."""
        return dict(zip(CLAIM_TIMES, (self.claimed_at, self.claimed_at + self.lease), strict=True))


def run_alone_apart(locked: list[tuple[Any, int | None]]) -> list[Any]:
    """The rows a claim takes of those it locked, in order: up to the first row that must run
    alone (RUN_ALONE), or that row by itself when it comes first. The rest stay READY (their
    locks end with the claim's transaction)."""
    taken: list[Any] = []
    for pk, token in locked:
        if token == RUN_ALONE:
            return taken or [pk]
        taken.append(pk)
    return taken
