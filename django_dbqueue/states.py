"""The life cycle of a queue row."""

from __future__ import annotations

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
