"""How long an idle worker waits before it probes for ready rows again.

Without LISTEN/NOTIFY (MariaDB, MySQL, SQLite) a new row is found by polling, so the wait
between two probes is the pickup latency, and its inverse is the load an idle worker puts on
the database. Work comes in bursts, so the worker polls in two speeds:

* **warm**, for :data:`WARM_WINDOW` seconds after it last claimed a row: a probe every
  ``poll_interval / 9`` (5 ms by default), so the next job of a trickle starts within a few
  milliseconds (a probe is an index-only read of one row: cheap, but not free). A polling
  worker's pickup is on average half this wait plus the claim; at a fifth of the interval
  (9 ms) the benchmark's trickle waited 9.4 ms at the median and 15.5 ms at the 95th
  percentile (issue #33 asks for 8 and 15). The price is paid only while warm: about 200
  probes a second instead of 110 in the two seconds after a job, none more when idle;
* **cold** after that: the wait doubles from the shortest up to ``poll_interval`` (45 ms by
  default), so a worker with nothing to do costs what ``DBQUEUE_POLL_INTERVAL`` says, and the
  first job after a quiet spell waits up to that long.

A worker woken by notifications (PostgreSQL) skips the warm speed, since a notification wakes
it at once, and polls cold only as the safety net (a lost notification, rows made by raw SQL,
rows scheduled for later), at least a second apart.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: Seconds after the last claimed row during which the worker polls warm.
WARM_WINDOW = 2.0
#: The warm probe interval, as a fraction of the poll interval (5 ms at the default 45 ms).
WARM_FRACTION = 1 / 9
#: No wait is shorter than this (s): a busy loop of probes would cost the database more than
#: the milliseconds it saves.
SHORTEST = 0.005
#: With notifications, the safety-net poll is at least this far apart (s).
LISTENING_CEILING = 1.0


class IdlePacing:
    """The waits of one worker's idle loop: :meth:`worked` after a claim that took rows,
    :meth:`woken` after a notification, :meth:`next_wait` before each wait."""

    def __init__(self, poll_interval: float, listening: Callable[[], bool] = lambda: False) -> None:
        self.poll_interval = poll_interval
        self.listening = listening
        self._last_work = float("-inf")
        self._cold_wait = self.shortest()

    def shortest(self) -> float:
        """The wait right after work or a wake-up: the next probe comes almost at once."""
        return max(self.poll_interval / 8, SHORTEST)

    def worked(self) -> None:
        self._last_work = time.monotonic()
        self._cold_wait = self.shortest()

    def woken(self) -> None:
        self._cold_wait = self.shortest()

    def next_wait(self) -> float:
        """The wait before the next probe, as the idle loop is about to wait."""
        if not self.listening() and time.monotonic() - self._last_work < WARM_WINDOW:
            return max(self.poll_interval * WARM_FRACTION, SHORTEST)
        wait = self._cold_wait
        self._cold_wait = min(wait * 2, self.ceiling())
        return wait

    def ceiling(self) -> float:
        """The longest wait: the poll interval (or the safety net's, with notifications)."""
        if self.listening():
            return max(self.poll_interval, LISTENING_CEILING)
        return self.poll_interval
