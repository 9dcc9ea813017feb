"""The purge phase's measure of a claim, from inside real ``runqueue`` workers: Django's
``django.db.backends`` log (each statement with its own time), kept for a claim's locking
SELECT (``… FOR UPDATE SKIP LOCKED`` on the message table) and its UPDATE to RUNNING."""

from __future__ import annotations

import logging
from pathlib import Path

TABLE = "django_dbqueue_message"


class ClaimStatements(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        sql = str(getattr(record, "sql", ""))
        if TABLE not in sql[:200]:
            return False
        if "SKIP LOCKED" in sql and "ORDER BY" in sql:  # the rescue's SELECT has no order
            record.claim_step = "select"
            return True
        if sql.startswith("UPDATE") and "queue_locked_by" in sql and "queue_attempts" in sql:
            record.claim_step = "update"
            return True
        return False


def claims(path: Path) -> list[tuple[float, float]]:
    """(start time, seconds) of each claim that took rows: a locking SELECT followed by its
    UPDATE in the same worker's log; an empty SELECT (nothing due) is not a claim."""
    found, pending = [], None
    for line in path.read_text().splitlines():
        at, took, step = line.split()
        if step == "select":
            pending = (float(at) - float(took), float(took))
        elif pending is not None:
            found.append((pending[0], pending[1] + float(took)))
            pending = None
    return found
