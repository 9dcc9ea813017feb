"""The life cycle of a queue row."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import models
from django.utils.translation import gettext_lazy as _


class QueueState(models.TextChoices):
    # Not queued: a domain row that exists but has nothing to do (yet).
    IDLE = "idle", _("Idle")
    # Waiting to run once queue_run_at is due. A row waiting for a retry is READY with
    # queue_attempts > 0 and queue_last_error set.
    READY = "ready", _("Ready")
    # Claimed by a worker; valid until queue_locked_until, fenced by queue_token.
    RUNNING = "running", _("Running")
    SUCCEEDED = "succeeded", _("Succeeded")
    # Gave up (attempts used up or a Discard): the dead-letter state, reason kept.
    FAILED = "failed", _("Failed")
    CANCELLED = "cancelled", _("Cancelled")


#: States in which a row still has work ahead of it.
ACTIVE_STATES = frozenset({QueueState.READY, QueueState.RUNNING})
#: States a row reaches when its work is over, one way or another.
TERMINAL_STATES = frozenset({QueueState.SUCCEEDED, QueueState.FAILED, QueueState.CANCELLED})


def validate_queue_state(value: Any) -> None:
    """``queue_state`` holds one of :class:`QueueState` (``full_clean()``, forms).

    A validator rather than ``choices`` on the mixin's field: choices are part of the field in
    every migration of every app that uses the mixin, so a new state would need a migration
    in each of them; this function is named there, and stays the same."""
    if value not in QueueState.values:
        raise ValidationError(
            _("%(value)r is not a queue state: use one of %(states)s."),
            code="invalid_queue_state",
            params={"value": value, "states": ", ".join(QueueState.values)},
        )


class AttemptOutcome(models.TextChoices):
    """How one attempt of a row ended (a ``QueueAttempt`` row's ``outcome``)."""

    SUCCEEDED = "succeeded", "Succeeded"
    RETRIED = "retried", "Failed, retried later"
    FAILED = "failed", "Failed for good"
    LOST = "lost", "Lease expired (worker lost)"
    CANCELLED = "cancelled", "Cancelled while running"
