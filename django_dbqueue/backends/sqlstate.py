"""The SQLSTATE of a PostgreSQL error, whichever driver raised it."""

from __future__ import annotations


def sqlstate(exc: BaseException) -> str | None:
    """The five-character SQLSTATE of ``exc`` (Django wraps the driver's error: it is the
    ``__cause__``), None if it has none. psycopg 3 calls it ``sqlstate``, psycopg2 ``pgcode``."""
    cause = exc.__cause__ or exc
    return getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
