"""A project that uses QueueMixin but forgot ``django_dbqueue`` in INSTALLED_APPS (issue #20,
defect 18): ``manage.py check`` must say so, not crash."""

from __future__ import annotations

from tests.settings import *  # noqa: F403

INSTALLED_APPS = [app for app in INSTALLED_APPS if app not in ("django_dbqueue", "tests.sparkapp")]  # noqa: F405
TASKS: dict = {}
