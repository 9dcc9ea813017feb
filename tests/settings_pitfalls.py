"""A project with the two set-up mistakes a first run makes (issue 34, items 9 and 10):
``rangefilter`` left out of INSTALLED_APPS and, when DBQUEUE_TEST_PITFALL_SQLITE is set, a
SQLite database without ``"transaction_mode": "IMMEDIATE"``. ``manage.py check`` must name both."""

from __future__ import annotations

import os

from tests.settings import *  # noqa: F403

if os.environ.get("DBQUEUE_TEST_PITFALL_RANGEFILTER"):
    INSTALLED_APPS = [app for app in INSTALLED_APPS if app != "rangefilter"]  # noqa: F405
if os.environ.get("DBQUEUE_TEST_PITFALL_SQLITE"):
    DATABASES = {  # SQLite's own default: DEFERRED transactions
        "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["DBQUEUE_TEST_PITFALL_SQLITE"]}
    }
