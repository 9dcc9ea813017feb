"""A project whose ``TASKS`` names django_dbqueue's backend but whose ``INSTALLED_APPS`` lacks
``django_dbqueue`` (issue #31, item 5): ``manage.py check`` must say so, not crash. Its one
app declares a task and no queue model."""

from __future__ import annotations

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS as ALL_APPS

WITHOUT = ("django_dbqueue", "tests.testapp", "tests.sparkapp", "shop")
INSTALLED_APPS = [*(app for app in ALL_APPS if app not in WITHOUT), "tests.tasksonlyapp"]
TASKS = {"default": {"BACKEND": "django_dbqueue.tasks.DatabaseBackend"}}
