"""SQLite: one writer at a time, so a claim is a compare-and-set; correct, not fast."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import QueueBackend

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper


class SQLiteBackend(QueueBackend):
    vendor = "sqlite"
    skip_locked = False
    bounded_fair = False

    def is_lock_conflict(self, exc: BaseException) -> bool:
        text = str(exc)
        return "database is locked" in text or "database table is locked" in text

    def configuration_warning(self) -> str | None:
        # A DEFERRED transaction (SQLite's default) reads first and asks for the write lock at
        # its first write; two workers that both read cannot both upgrade, and SQLite fails one
        # at once with "database is locked" whatever the timeout (66 of 300 attempts with two
        # workers). IMMEDIATE (or EXCLUSIVE) takes the write lock at BEGIN, where the timeout waits.
        mode = self.connection.settings_dict.get("OPTIONS", {}).get("transaction_mode")
        if isinstance(mode, str) and mode.upper() in ("IMMEDIATE", "EXCLUSIVE"):
            return None
        return (
            f'Database \'{self.alias}\' is SQLite without "transaction_mode": "IMMEDIATE": two '
            "workers (or a worker and a web request) fail attempts with 'database is locked'."
        )

    def bound_idle_transactions(self, connection: BaseDatabaseWrapper, seconds: float) -> bool:
        return True  # a file on the workers' own host: no network can cut a worker off it

    def server_in_transaction(self) -> bool:
        raw = self.connection.connection
        return bool(raw is not None and raw.in_transaction)
