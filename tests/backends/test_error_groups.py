"""The database's error group of a stored traceback is the one Python computes (issue #37:
the admin's dead-letter console groups failed rows in SQL); SQLite has none (None)."""

from __future__ import annotations

import pytest
from django.db import connection

from django_dbqueue.backends import backend_for
from django_dbqueue.tracebacks import error_group
from tests.testapp.models import Noop

pytestmark = pytest.mark.django_db

ERRORS = [
    'Traceback (most recent call last):\n  File "x.py", line 3, in f\nValueError: account 200014 closed\n\n',
    "RuntimeError: payment 950.00 of 1,234.56 for bob@example.com refused  \n",
    "KeyError: 'order 4f9c2ab1-0b1d-4c33-9a7e-1f2e3d4c5b6a at 0x7f3a12ff'\n",
    "lease expired: worker host-1 gone\nagain: token 9f8e7d6c5b4a39 3\n",
    "no newline at all",
]


def test_the_database_groups_errors_as_python_does() -> None:
    expression = backend_for(connection.alias).error_group("queue_last_error")
    if connection.vendor == "sqlite":
        assert expression is None
        return
    rows = Noop.objects.bulk_create([Noop(queue_last_error=text) for text in ERRORS])
    found = dict(
        Noop.objects.filter(pk__in=[r.pk for r in rows])
        .annotate(g=expression)
        .values_list("queue_last_error", "g")
    )
    assert found == {text: error_group(text) for text in ERRORS}
    assert error_group(ERRORS[0]) == "ValueError: account <n> closed"
