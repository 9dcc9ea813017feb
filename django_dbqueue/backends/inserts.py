"""Inserting rows that may already exist, and knowing how many the database inserted.

``bulk_create(ignore_conflicts=True)`` (``INSERT IGNORE`` on MySQL/MariaDB, ``ON CONFLICT DO
NOTHING`` on PostgreSQL, ``INSERT OR IGNORE`` on SQLite) skips a duplicate atomically, which is
what makes racing publishers safe, but it returns the objects it was given, not the rows it
wrote. The database knows: each of those statements' row count is the rows it inserted, the
skipped ones left out. An execute wrapper (Django's public instrumentation hook) reads that
count from the statements ``bulk_create`` runs, so the statements stay the ORM's own and every
other wrapper (Sentry, debug toolbar, ``assertNumQueries``) sees them as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connections


def insert_new(model: Any, using: str, objs: Sequence[Any], batch_size: int | None = None) -> int:
    """Insert ``objs`` skipping those a unique constraint already holds; return how many
    rows this call inserted (what a concurrent caller inserted first is not counted)."""
    inserted = 0

    def count(execute: Any, sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
        nonlocal inserted
        result = execute(sql, params, many, context)
        if sql.lstrip()[:6].upper() == "INSERT":
            inserted += max(context["cursor"].rowcount, 0)  # -1: a driver that cannot tell
        return result

    with connections[using].execute_wrapper(count):
        model._base_manager.using(using).bulk_create(objs, batch_size=batch_size, ignore_conflicts=True)
    return inserted
