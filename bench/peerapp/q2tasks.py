"""The no-op job of django-q2 (a plain function called by its dotted path)."""

from __future__ import annotations

from bench import ledger


def noop(job_id: int) -> None:
    ledger.record(job_id)
