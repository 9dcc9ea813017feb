"""Argument validators (argparse ``type=``) shared by the queue's management commands.

Every value is checked here, before the command does anything: a value they refuse is reported
by Django's parser — a ``CommandError`` from ``call_command()``, and on the command line the
usage and the error (argparse's exit status for a bad option, 2), never a traceback, and never
after a first batch of work.

Bounds (documented in the README):

* ``--lease``: 1 s to 7 days; ``--poll-interval``: 0.01 s to 1 hour (the ``DBQUEUE_LEASE`` and
  ``DBQUEUE_POLL_INTERVAL`` declarations in ``conf.py``); ``--pause``: 0 to 1 hour.
* durations (``--older-than``, ``--attempts-older-than``, ``--since``, ``--delay``): up to
  365,000 days (about 999 years), so that now minus (or plus) the duration stays inside what every
  supported database's datetime column holds (MySQL's ``DATETIME``: years 1000 to 9999).
* NaN, infinities and negative numbers are refused everywhere.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django_dbqueue.conf import Setting, Settings
from django_dbqueue.messaging.handlers import NAME

DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdw]?)\Z")
#: Worker ids: stored in ``queue_locked_by`` and shown to operators. ``\Z``, not ``$``: a
#: trailing newline is not part of a name.
WORKER_ID = re.compile(r"^[A-Za-z0-9_.:@-]{1,200}\Z")
UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
#: The longest duration a command accepts (see the module's docstring).
MAX_DURATION = timedelta(days=365_000)


def whole_number(low: int = 1, high: int | None = None) -> Any:
    """An argparse ``type=`` for an integer in [low, high]."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
        if number < low or (high is not None and number > high):
            bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"must be {bounds}, got {number}")
        return number

    return parse


def seconds_between(low: float, high: float) -> Callable[[str], float]:
    """An argparse ``type=`` for a finite number of seconds in [low, high]."""

    def parse(value: str) -> float:
        try:
            seconds = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
        if not low <= seconds <= high:  # also refuses nan
            kind = "positive number" if low > 0 else "number"
            raise argparse.ArgumentTypeError(
                f"must be a {kind} of seconds from {low:g} to {high:g} ({_readable(high)}), got {value}"
            )
        return seconds

    return parse


def setting_range(setting: Setting[Any]) -> tuple[float, float]:
    """The bounds a command-line value shares with the setting it stands in for."""
    if setting.low is None or setting.high is None:
        raise ValueError(f"{setting.setting_name} is declared without both bounds")
    return setting.low, setting.high


#: ``--lease``: the range of ``DBQUEUE_LEASE``.
lease_seconds = seconds_between(*setting_range(Settings.LEASE))
#: ``--poll-interval``: the range of ``DBQUEUE_POLL_INTERVAL``.
poll_seconds = seconds_between(*setting_range(Settings.POLL_INTERVAL))
#: ``--pause`` between batches of a command: none to an hour.
pause_seconds = seconds_between(0, 3600)


def worker_id(value: str) -> str:
    if not WORKER_ID.match(value):
        raise argparse.ArgumentTypeError(
            "use 1-200 letters, digits and . _ : @ - (it is stored and shown to operators)"
        )
    return value


def queue_name(value: str) -> str:
    if not NAME.match(value) or len(value) > 64:
        raise argparse.ArgumentTypeError("use 1-64 letters, digits and . _ : -")
    return value


def duration(value: str) -> timedelta:
    """``90``, ``45s``, ``30m``, ``12h``, ``7d``, ``2w``: at most :data:`MAX_DURATION`."""
    match = DURATION.match(value.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"{value!r}: use a number with s, m, h, d or w (e.g. 7d, 12h)")
    seconds = float(match.group(1)) * UNITS[match.group(2)]
    if not seconds <= MAX_DURATION.total_seconds():  # also refuses an overflow to inf
        raise argparse.ArgumentTypeError(
            f"{value!r} is too long: at most {MAX_DURATION.days} days (about 999 years), "
            "so the date stays within what the database's datetime columns hold"
        )
    return timedelta(seconds=seconds)


def _readable(seconds: float) -> str:
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"{count} {unit[:-1] if count == 1 else unit}"
    return f"{seconds:g} s"
