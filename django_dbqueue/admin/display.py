"""How the admin shows queue values to a person: states, errors, times, counts."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone
from django.utils.formats import number_format
from django.utils.html import format_html
from django.utils.text import Truncator
from django.utils.translation import ngettext

from ..states import QueueState

#: Times to the second: operators compare them with logs and with each other.
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


def describe_queue_state(row: Any, now: Any = None) -> str:
    """A person's reading of the row's state: "retrying, attempt 3 of 8", "scheduled", …"""
    now = now or timezone.now()
    state = row.queue_state
    attempts = row.queue_attempts
    max_attempts = getattr(type(row).queue_retry, "max_attempts", None)
    of = f" of {max_attempts}" if max_attempts else ""
    if state == QueueState.READY:
        if attempts and row.queue_last_error:
            return f"retrying, attempt {attempts + 1}{of}"
        # An unsaved row holds the database clock's expression, not a time yet (QueueTimeField).
        if isinstance(row.queue_run_at, datetime) and row.queue_run_at > now:
            return "scheduled"
        return "ready"
    if state == QueueState.RUNNING:
        who = f" by {row.queue_locked_by}" if row.queue_locked_by else ""
        expired = " (lease expired)" if row.queue_locked_until and row.queue_locked_until < now else ""
        return f"running{who}, attempt {attempts}{of}{expired}"
    if state == QueueState.FAILED:
        return ngettext("failed after %d attempt", "failed after %d attempts", attempts) % attempts
    return str(QueueState(state).label).lower() if state in QueueState.values else str(state)


def error_summary(text: str, length: int = 120) -> str:
    """One line that says what went wrong: a traceback's exception line, else the first line."""
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    if not lines:
        return ""
    line = lines[-1] if lines[0].startswith("Traceback") else lines[0]
    return Truncator(line.strip()).chars(length)


def traceback_html(text: str) -> str:
    """The whole error text with its indentation kept (a traceback reads by its indents)."""
    if not text:
        return "-"
    return format_html('<pre class="dbqueue-traceback">{}</pre>', text)


def when(value: datetime | None) -> str:
    """A time in the current time zone, to the second: ``2026-11-24 02:23:11``; "-" for none
    yet (an unsaved row's queue times are the database clock's expression until the INSERT)."""
    if not isinstance(value, datetime):
        return "-"
    return timezone.localtime(value).strftime(TIME_FORMAT) if timezone.is_aware(value) else str(value)


def number(n: int) -> str:
    """A count with thousands separators: ``300,436``."""
    return number_format(n, force_grouping=True)
