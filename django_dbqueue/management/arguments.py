"""Argument validators (argparse ``type=``) shared by the queue's management commands.

A value they refuse is reported by Django's parser: usage and the error on the command line
(exit code 2), a CommandError from ``call_command()``."""

from __future__ import annotations

import argparse
import re
from datetime import timedelta
from typing import Any

DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdw]?)$")
UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


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


def positive_seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not seconds > 0 or seconds == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {value}")
    return seconds


def duration(value: str) -> timedelta:
    """``90``, ``45s``, ``30m``, ``12h``, ``7d``, ``2w``."""
    match = DURATION.match(value.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"{value!r}: use a number with s, m, h, d or w (e.g. 7d, 12h)")
    return timedelta(seconds=float(match.group(1)) * UNITS[match.group(2)])
