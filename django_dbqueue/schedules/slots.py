"""When a schedule fires: its slots, from a cron line or a plain interval, in a time zone.

A *slot* is the instant a firing belongs to (UTC, whole seconds). Slots are a pure function
of the timing, so every host computes the same ones; the ledger's unique key on
(schedule, slot) is what makes a slot fire once (``schedules/firing.py``).

Cron lines are evaluated by cronsim (Debian cron's semantics, DST included: a daily 02:30
fires once on both DST days; docs/schedules.md says why cronsim and not croniter). A 6-field
line has a leading seconds field. Intervals are elapsed time, aligned on the Unix epoch
(``every=3600`` fires on the hour, UTC), with no time zone in play.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from django_dbqueue.compat import UTC, StrEnum

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
SECOND = timedelta(seconds=1)
#: Longest interval: beyond that, a cron line says it better.
MAX_EVERY = 366 * 86_400


class InvalidSchedule(ValueError):
    """A schedule declaration that cannot be used (the message says which part and why)."""


class CatchUp(StrEnum):
    """What a schedule does with slots missed while no worker ran (docs/schedules.md)."""

    SKIP = "skip"  # fire the newest due slot only if it is within DBQUEUE_SCHEDULE_GRACE
    LATEST = "latest"  # fire the newest due slot, once, however many were missed
    ALL = "all"  # fire every missed slot, the newest ``catch_up_limit`` of them


def seconds_of(every: object) -> int:
    """An interval as whole seconds, or InvalidSchedule."""
    if isinstance(every, timedelta):
        seconds = every.total_seconds()
    elif isinstance(every, (int, float)) and not isinstance(every, bool):
        seconds = float(every)
    else:
        raise InvalidSchedule(f"every must be a number of seconds or a timedelta, not {every!r}")
    if not seconds >= 1 or seconds != int(seconds) or seconds > MAX_EVERY:  # `not >=`: NaN too
        raise InvalidSchedule(
            f"every must be a whole number of seconds from 1 to {MAX_EVERY} (366 days), not {every!r}"
        )
    return int(seconds)


def zone(name: object) -> ZoneInfo:
    if not isinstance(name, str) or not name:
        raise InvalidSchedule(f"timezone must be an IANA time zone name, not {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidSchedule(
            f"unknown time zone {name!r} (use an IANA name such as 'Europe/Berlin')"
        ) from None


@dataclass(frozen=True)
class Timing:
    """A validated cron line or interval, and its time zone."""

    cron: str = ""
    every: int | None = None  #: whole seconds (``seconds_of()`` turns a timedelta into them)
    timezone: str = "UTC"

    def __post_init__(self) -> None:
        tz = zone(self.timezone)
        if bool(self.cron) == (self.every is not None):
            raise InvalidSchedule("give exactly one of cron (a cron line) and every (an interval)")
        if self.every is not None:
            object.__setattr__(self, "every", seconds_of(self.every))
            return
        if not isinstance(self.cron, str) or len(self.cron.split()) not in (5, 6):
            raise InvalidSchedule(
                f"cron line {self.cron!r}: use 5 fields (minute hour day month weekday), "
                "or 6 with a leading seconds field"
            )
        try:
            next(CronSim(self.cron, datetime(2000, 1, 1, tzinfo=tz)))
        except CronSimError as exc:
            raise InvalidSchedule(f"cron line {self.cron!r}: {exc}") from None
        except StopIteration:
            raise InvalidSchedule(f"cron line {self.cron!r} never fires") from None

    def describe(self) -> str:
        if self.every is not None:
            return f"every {self.every} s"
        return f"{self.cron} ({self.timezone})"

    def next_after(self, moment: datetime) -> datetime:
        """The first slot strictly after ``moment``."""
        if self.every is not None:
            elapsed = (moment - EPOCH) // timedelta(seconds=self.every)
            return EPOCH + timedelta(seconds=self.every * (elapsed + 1))
        return next(self._forward(moment))

    def due(self, start: datetime, end: datetime, newest: int) -> tuple[list[datetime], bool]:
        """The slots from ``start`` to ``end`` (both included), the newest ``newest`` of them,
        oldest first; and whether older ones were left out."""
        if end < start:
            return [], False
        if self.every is not None:
            step = timedelta(seconds=self.every)
            first = -((EPOCH - start) // step)  # ceil: the first slot at or after start
            last = (end - EPOCH) // step
            kept = range(max(first, last - newest + 1), last + 1)
            return [EPOCH + step * k for k in kept], kept.start > first
        # Forward iteration defines the slots; reverse iteration can differ around DST, so a
        # backward walk only finds where to start (one slot early), and a long outage costs
        # ``newest`` steps rather than one per missed slot.
        top = end.replace(microsecond=0) + SECOND  # reverse iteration starts one second before
        backward = CronSim(self.cron, top.astimezone(zone(self.timezone)), reverse=True)
        floor = start
        for _ in range(newest + 2):
            candidate = next(backward, None)
            if candidate is None:
                break
            floor = min(floor, candidate)
            if candidate < start:
                break
        found = []
        for slot in self._forward(floor - SECOND):
            if slot > end:
                break
            if slot >= start:
                found.append(slot)
        return found[-newest:], len(found) > newest

    def _forward(self, after: datetime) -> Iterator[datetime]:
        for slot in CronSim(self.cron, after.astimezone(zone(self.timezone))):
            yield slot.astimezone(UTC)
