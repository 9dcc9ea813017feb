"""What a prepared statement's text is known by (backends/prepared.py): two runs share a
prepared statement only when the driver would make the same text of them."""

from __future__ import annotations

from django_dbqueue.backends.prepared import _key

SQL = "SELECT 1 WHERE %s"


def test_equal_values_of_other_types_are_other_texts() -> None:
    # 1 == True in Python; psycopg writes 1 and true, which PostgreSQL types apart.
    assert _key(SQL, [1]) != _key(SQL, [True])
    assert _key(SQL, [1]) == _key(SQL, [1])


def test_a_value_that_cannot_be_a_key_is_never_prepared() -> None:
    assert _key(SQL, [[1, 2]]) is None
