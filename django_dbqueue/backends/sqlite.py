"""SQLite: one writer at a time, so a claim is a compare-and-set; correct, not fast."""

from __future__ import annotations

from .base import QueueBackend


class SQLiteBackend(QueueBackend):
    vendor = "sqlite"
    skip_locked = False

    def is_lock_conflict(self, exc: BaseException) -> bool:
        text = str(exc)
        return "database is locked" in text or "database table is locked" in text

    def server_in_transaction(self) -> bool:
        raw = self.connection.connection
        return bool(raw is not None and raw.in_transaction)
