"""Test settings: the database comes from DATABASE_URL (SQLite by default).

DATABASE_URL=mysql://root@127.0.0.1:3306/dbqueue     (MariaDB / MySQL)
DATABASE_URL=postgres://postgres@127.0.0.1:5432/dbqueue
DATABASE_URL=sqlite:///tests/dbqueue.sqlite3
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import dj_database_url
import django

BASE_DIR = Path(__file__).resolve().parent
# The example shop's app, so tests can drive its admin as shipped
# (tests/surfaces/admin/test_admin_example.py).
sys.path.insert(0, str(BASE_DIR.parent / "example_project"))

SECRET_KEY = "tests-only-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ALLOWED_HOSTS = ["*"]

DATABASE_URL = os.environ.get("DATABASE_URL", f"sqlite:///{BASE_DIR / 'dbqueue.sqlite3'}")
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=0)}
_default = DATABASES["default"]
if _default["ENGINE"].endswith("sqlite3"):
    # A file, not :memory:, so that worker subprocesses see the same database; IMMEDIATE
    # transactions take the write lock up front (SQLite has no SKIP LOCKED).
    # Named after the database's own file, so suites of several DATABASE_URLs run side by side.
    _default.setdefault("TEST", {})["NAME"] = str(BASE_DIR / f"test_{Path(_default['NAME']).name}")
    _default["OPTIONS"] = {"transaction_mode": "IMMEDIATE", "timeout": 30}
elif _default["ENGINE"].endswith("postgresql") and os.environ.get("DBQUEUE_TEST_PREPARED"):
    # psycopg's server-side binding, each statement prepared from its fifth run on a connection
    # (psycopg's own default threshold; Django's is None, never): docs/reference/databases.md.
    _default["OPTIONS"] = {"server_side_binding": True, "prepare_threshold": 5}
elif _default["ENGINE"].endswith("mysql"):
    _default["OPTIONS"] = {"charset": "utf8mb4"}
    _default.setdefault("TEST", {})["CHARSET"] = "utf8mb4"
    _default["TEST"]["COLLATION"] = "utf8mb4_unicode_ci"

# A second database on the same server, for the tests that claim from a database other than
# the default (tests/contract/test_second_database.py). Only when asked for: with a second alias
# Django's own checks (a JSONField's, on SQLite) query it in every test, and the commands that
# tests run in subprocesses would connect to it by its own name. The contract passes of `make
# test` run that file again with DBQUEUE_TEST_SECOND_DATABASE=1.
if os.environ.get("DBQUEUE_TEST_SECOND_DATABASE") == "1":
    DATABASES["other"] = {**_default, "TEST": {**_default.get("TEST", {})}}
    if _default["ENGINE"].endswith("sqlite3"):
        DATABASES["other"]["TEST"]["NAME"] = str(BASE_DIR / f"test_other_{Path(_default['NAME']).name}")
    else:
        DATABASES["other"]["TEST"]["NAME"] = f"test_{_default['NAME']}_other"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rangefilter",
    "django_dbqueue",
    "tests.testapp",
    "tests.sparkapp",
    "shop",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "tests.urls"
STATIC_URL = "static/"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
if django.VERSION >= (6, 0):  # django.tasks; on 5.2 the setting is refused (W060)
    TASKS = {
        "default": {"BACKEND": "django_dbqueue.tasks.DatabaseBackend", "QUEUES": ["default", "other"]},
    }
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {
        "django_dbqueue": {"handlers": ["console"], "level": os.environ.get("DBQUEUE_LOG_LEVEL", "WARNING")}
    },
}

# Crash tests shorten the rescue's period (their worker subprocesses read it here).
# The schedule allowlist: targets the tests' schedule rows use besides declared ones.
DBQUEUE_SCHEDULE_TARGETS = ["message:test.echo", "model:testapp.Job", "task:tests.testapp.tasks.add"]

if os.environ.get("DBQUEUE_TEST_RESCUE_INTERVAL"):
    DBQUEUE_RESCUE_INTERVAL = float(os.environ["DBQUEUE_TEST_RESCUE_INTERVAL"])

# Schedule tests tick their workers faster, so that hosts race for the same slots.
if os.environ.get("DBQUEUE_TEST_SCHEDULE_INTERVAL"):
    DBQUEUE_SCHEDULE_INTERVAL = float(os.environ["DBQUEUE_TEST_SCHEDULE_INTERVAL"])

# A worker subprocess that plays a host whose wall clock is off (e.g. "+1h", "-10m"): before
# the models are imported, so their default=timezone.now is the shifted one (tests/chaos/skew.py).
if os.environ.get("DBQUEUE_TEST_CLOCK_OFFSET"):
    from tests.chaos.skew import apply

    apply(os.environ["DBQUEUE_TEST_CLOCK_OFFSET"])

# Worker subprocesses started by the tests use the test database pytest-django created.
if os.environ.get("DBQUEUE_TEST_DB_NAME"):
    _default["NAME"] = os.environ["DBQUEUE_TEST_DB_NAME"]
# ... through another Django backend of the same server, e.g. mysql.connector.django.
if os.environ.get("DBQUEUE_TEST_ENGINE"):
    _default["ENGINE"] = os.environ["DBQUEUE_TEST_ENGINE"]
