"""Settings of the chaos suite's processes: the private MariaDB (or PostgreSQL) server of
``CHAOS_DATABASE_URL``."""

from __future__ import annotations

import os

import dj_database_url

from tests.settings import *  # noqa: F403

DATABASES = {"default": dj_database_url.parse(os.environ["CHAOS_DATABASE_URL"], conn_max_age=0)}
if DATABASES["default"]["ENGINE"].endswith("mysql"):
    DATABASES["default"]["OPTIONS"] = {"charset": "utf8mb4", "connect_timeout": 5}
else:  # a private PostgreSQL cluster (tests/chaos/postgres.py; the workflow run's --postgresql)
    DATABASES["default"]["OPTIONS"] = {"connect_timeout": 5}

# The workflow chaos run's rows (tests/testapp WorkflowBase.queue_retry_policy): attempts no
# kill rate of the run can use up, so a row ends FAILED only for a defect (a run that fails
# again and again loops until the run's timeout and its table shows the attempt history).
TESTAPP_WORKFLOW_ATTEMPTS = 1_000

# Rescue often and flush often: kills and restarts should cost seconds, not minutes.
DBQUEUE_RESCUE_INTERVAL = 0.5
DBQUEUE_FLUSH_INTERVAL = 0.5

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {"django_dbqueue": {"handlers": ["console"], "level": "INFO"}},
}

if os.environ.get("CHAOS_CLOCK_OFFSET"):
    # This process plays a host whose wall clock is hours off (tests/chaos/skew.py).
    from tests.chaos.skew import apply

    apply(os.environ["CHAOS_CLOCK_OFFSET"])

if os.environ.get("CHAOS_ATOMIC_IDLE_TIMEOUT"):
    # The many-hosts harness (tests/chaos/netns) runs atomic workers with the guard off ("0")
    # to show what it is for.
    DBQUEUE_ATOMIC_IDLE_TIMEOUT = float(os.environ["CHAOS_ATOMIC_IDLE_TIMEOUT"])
