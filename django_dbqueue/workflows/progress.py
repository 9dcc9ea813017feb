"""A workflow run's progress (``wf.progress(fraction, message)``), throttled.

A handler may report progress in a tight loop: each call only remembers the value, and the
value is written when ``INTERVAL`` seconds passed since the last write, when it reaches 1.0,
and when the run ends (parked or finished). One UPDATE a write (an INSERT the first time), in
the run's transaction in atomic mode (it shows once the step commits), in autocommit in lease
mode (it shows at once).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from ..messaging.payloads import check_text
from ..tables.workflow import WorkflowProgress
from .checkpoints import key_of

if TYPE_CHECKING:
    from ..queue.lease import Claim
    from ..queue.row import QueueRow

#: Seconds between two writes of a run's progress.
INTERVAL = 1.0


class Progress:
    """The progress of one run of ``row``."""

    def __init__(self, row: QueueRow, claim: Claim) -> None:
        self.row = row
        self.claim = claim
        self.pending: tuple[float, str] | None = None
        self.written_at: float | None = None

    def report(self, fraction: float, message: str = "") -> None:
        if (
            isinstance(fraction, bool)
            or not isinstance(fraction, (int, float))
            or not math.isfinite(fraction)
        ):
            raise TypeError(f"progress() takes a fraction from 0 to 1, not {fraction!r}")
        if not 0 <= fraction <= 1:
            raise ValueError(f"progress() takes a fraction from 0 to 1, not {fraction!r}")
        if not isinstance(message, str):
            raise TypeError(f"progress()'s message is a string, not {message!r}")
        self.pending = (float(fraction), check_text(message, "the progress message")[:255])
        now = time.monotonic()
        if fraction >= 1 or self.written_at is None or now - self.written_at >= INTERVAL:
            self.flush()

    def flush(self) -> None:
        """Write the last value reported, if not written yet."""
        if self.pending is None:
            return
        fraction, message = self.pending
        values = {"fraction": fraction, "message": message, "updated_at": self.claim.now()}
        rows = WorkflowProgress.objects.using(self.claim.using).filter(**key_of(self.row))
        if not rows.update(**values):
            WorkflowProgress.objects.using(self.claim.using).create(**key_of(self.row), **values)
        self.pending = None
        self.written_at = time.monotonic()
