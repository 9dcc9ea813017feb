"""Settings of the benchmark project; ``BENCH_SYSTEM`` picks the queue under test.

Every system gets its own MariaDB database (``bench_<system>``) on the same server:

* ``dbqueue`` - django_dbqueue (this repository), app ``bench.dbqapp``;
* ``tasksdb`` - django-tasks-db, Django's ``django.tasks`` database backend;
* ``djqueue`` - dj_queue (``django.tasks`` backend, Solid Queue design);
* ``q2``      - django-q2 with its ORM broker.

The peers are installed only in the benchmark's own virtualenv (``bench/requirements.txt``).
"""

from __future__ import annotations

import os

SYSTEM = os.environ.get("BENCH_SYSTEM", "dbqueue")
#: The prefix of the databases (bench/ledger.py: PREFIX).
DB_PREFIX = os.environ.get("BENCH_DB_PREFIX", "bench")
WORKERS = int(os.environ.get("BENCH_WORKERS", "1"))
#: Seconds between polls of an idle peer worker (their "fastest sensible" setting here).
PEER_POLL = float(os.environ.get("BENCH_PEER_POLL", "0.1"))

SECRET_KEY = "bench-only-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ALLOWED_HOSTS = ["*"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.mysql",
        "NAME": os.environ.get("BENCH_DB_NAME", f"{DB_PREFIX}_{SYSTEM}"),
        "USER": os.environ.get("BENCH_DB_USER", "root"),
        "PASSWORD": os.environ.get("BENCH_DB_PASSWORD", ""),
        "HOST": os.environ.get("BENCH_DB_HOST", "127.0.0.1"),
        "PORT": os.environ.get("BENCH_DB_PORT", "3306"),
        "OPTIONS": {"charset": "utf8mb4"},
        "CONN_MAX_AGE": None,
    }
}

INSTALLED_APPS = ["django.contrib.contenttypes"]
TASKS: dict = {}

if SYSTEM == "dbqueue":
    INSTALLED_APPS += ["django_dbqueue", "bench.dbqapp"]
    # The library's defaults are measured; BENCH_DBQ_HISTORY=0/1 overrides attempt history
    # (for profiling its cost).
    if os.environ.get("BENCH_DBQ_HISTORY"):
        DBQUEUE_HISTORY = os.environ["BENCH_DBQ_HISTORY"] == "1"
elif SYSTEM == "tasksdb":
    INSTALLED_APPS += ["django_tasks_db", "bench.peerapp"]
    TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
elif SYSTEM == "djqueue":
    INSTALLED_APPS += ["dj_queue", "bench.peerapp"]
    TASKS = {
        "default": {
            "BACKEND": "dj_queue.backend.DjQueueBackend",
            "OPTIONS": {
                "workers": [
                    {
                        "queues": "*",
                        "processes": WORKERS,
                        "threads": int(os.environ.get("BENCH_DJQ_THREADS", "3")),
                        "polling_interval": PEER_POLL,
                    }
                ],
            },
        }
    }
elif SYSTEM == "q2":
    INSTALLED_APPS += ["django_q", "bench.peerapp"]
    Q_CLUSTER = {
        "name": "bench",
        "orm": "default",
        "workers": WORKERS,
        "poll": PEER_POLL,
        "bulk": int(os.environ.get("BENCH_Q2_BULK", "1")),
        "save_limit": -1,  # do not store successes: the fastest setting
        "timeout": 60,
        "retry": 120,
        "max_attempts": 1,
        "catch_up": False,
        "log_level": "WARNING",
    }
else:
    raise RuntimeError(f"unknown BENCH_SYSTEM {SYSTEM!r}")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
}
