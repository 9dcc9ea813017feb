"""A wrong wall clock for one ``runqueue`` process: ``CHAOS_CLOCK_OFFSET=-5h``.

Shifts what Python code of the process reads as the wall clock: ``time.time()``,
``time.time_ns()`` and ``django.utils.timezone.now()`` (what Django and django_dbqueue use for
"now"). The monotonic clock stays right, as on a real host whose wall clock is off.

libfaketime was tried first (LD_PRELOAD, ``FAKETIME=-5h``): with Python 3.13 it makes every
``time.sleep()`` fail with EINVAL once ``FAKETIME_DONT_FAKE_MONOTONIC=1``, and every timed
wait hang or spin without it, so the workers could not run at all.
"""

from __future__ import annotations

import re
import time
from datetime import timedelta

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse(offset: str) -> float:
    match = re.fullmatch(r"([+-]?\d+(?:\.\d+)?)([smhd])", offset.strip())
    if not match:
        raise ValueError(f"clock offset {offset!r}: use e.g. -5h or +90m")
    return float(match.group(1)) * UNITS[match.group(2)]


def apply(offset: str) -> float:
    seconds = parse(offset)
    real_time, real_time_ns = time.time, time.time_ns
    time.time = lambda: real_time() + seconds
    time.time_ns = lambda: real_time_ns() + int(seconds * 1e9)

    from django.utils import timezone

    real_now = timezone.now
    timezone.now = lambda: real_now() + timedelta(seconds=seconds)
    return seconds
