"""Settings of the soak's processes: the chaos suite's (a database from ``CHAOS_DATABASE_URL``,
log lines with the pid), with the package's defaults for flushing, and a rescue every second
so a killed worker's rows come back a second after their lease ran out."""

from __future__ import annotations

from tests.chaos.settings import *  # noqa: F403

DBQUEUE_RESCUE_INTERVAL = 1.0
DBQUEUE_FLUSH_INTERVAL = 1.0  # the package's default (the chaos suite flushes faster)
