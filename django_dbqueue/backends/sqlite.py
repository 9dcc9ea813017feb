"""SQLite: one writer at a time, so a claim is a compare-and-set; correct, not fast."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import QueueBackend

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper


class SQLiteBackend(QueueBackend):
    vendor = "sqlite"
    skip_locked = False

    def is_lock_conflict(self, exc: BaseException) -> bool:
        text = str(exc)
        return "database is locked" in text or "database table is locked" in text

    def bound_idle_transactions(self, connection: BaseDatabaseWrapper, seconds: float) -> bool:
        return True  # a file on the workers' own host: no network can cut a worker off it

    def server_in_transaction(self) -> bool:
        raw = self.connection.connection
        return bool(raw is not None and raw.in_transaction)
