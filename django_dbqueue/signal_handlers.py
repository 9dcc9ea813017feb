"""Default receivers: log what the queue does, lazily formatted.

Successes are logged (at DEBUG) by ``models.record_successes`` itself rather than by a
receiver: a receiver would make every success of every batch dispatch a signal."""

from __future__ import annotations

import logging
from typing import Any

from django.dispatch import receiver

from .signals import job_claimed, job_failed

logger = logging.getLogger("django_dbqueue")


@receiver(job_claimed, dispatch_uid="django_dbqueue.log_claimed")
def log_claimed(sender: Any, rows: list[Any], worker_id: str, **kwargs: Any) -> None:
    logger.debug("%s claimed %d %s row(s)", worker_id, len(rows), sender._meta.label)


@receiver(job_failed, dispatch_uid="django_dbqueue.log_failed")
def log_failed(sender: Any, row: Any, error: Any, retry_at: Any, **kwargs: Any) -> None:
    if isinstance(error, BaseException):
        summary = [f"{type(error).__name__}: {error}".strip()]
    else:
        summary = str(error).strip().splitlines()[-1:] or ["(no message)"]
    if retry_at is None:
        logger.error(
            "%s pk=%s FAILED for good after %s attempt(s): %s",
            sender._meta.label,
            row.pk,
            row.queue_attempts,
            summary[0],
        )
    else:
        logger.warning(
            "%s pk=%s attempt %s failed, retry at %s: %s",
            sender._meta.label,
            row.pk,
            row.queue_attempts,
            retry_at.isoformat(),
            summary[0],
        )
