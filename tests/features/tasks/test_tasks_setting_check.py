"""``TASKS`` on a Django without ``django.tasks`` (5.2 LTS) is not silently ignored (issue #35)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import django
import pytest
from django.test import override_settings

from django_dbqueue.checks import check_tasks_setting

OURS = {"default": {"BACKEND": "django_dbqueue.tasks.DatabaseBackend"}}


@contextmanager
def django_without_tasks() -> Iterator[None]:
    """Django 5.2 itself (the Python 3.10/3.11 smoke runs); on 6.x, ``django.tasks`` made unimportable
    for the time of the check (inside override_settings, whose signal handlers import it)."""
    if django.VERSION < (6, 0):
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        for name in [n for n in sys.modules if n == "django.tasks" or n.startswith("django.tasks.")]:
            patch.delitem(sys.modules, name)
        patch.setitem(sys.modules, "django.tasks", None)  # `import django.tasks` raises ImportError
        yield


def _w060() -> list:
    return [message for message in check_tasks_setting() if message.id == "django_dbqueue.W060"]


def test_tasks_without_django_tasks_is_a_warning_that_names_the_ways_out() -> None:
    with override_settings(TASKS=OURS), django_without_tasks():
        (warning,) = _w060()
    assert "has no django.tasks" in warning.msg
    assert "Django 6.0" in warning.hint and "django-tasks" in warning.hint


def test_no_tasks_setting_no_warning() -> None:
    with override_settings(TASKS=None), django_without_tasks():
        assert _w060() == []


@pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks is new in Django 6.0")
def test_tasks_on_django_6_is_quiet() -> None:
    with override_settings(TASKS=OURS):
        assert _w060() == []
