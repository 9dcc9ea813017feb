"""Firing schedules: one ledger row and one job per slot, in one transaction.

Any number of hosts may fire the same schedule at once. Each computes the due slots from
the row's ``next_due`` and the database clock, and inserts a ``ScheduleFiring`` per slot;
the unique key on (schedule, slot) lets one insert win, and the loser's IntegrityError rolls
back the job it was enqueueing. So a slot's job exists iff its firing row exists, without
a leader. ``next_due`` then moves on by a guarded UPDATE that never moves it back.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import DEFAULT_DB_ALIAS, IntegrityError, InterfaceError, OperationalError, router, transaction

from ..backends import DbNow, aware
from ..conf import settings
from ..tables.schedule import Schedule, ScheduleFiring
from ..tracebacks import describe_error
from . import targets
from .slots import CatchUp, InvalidSchedule, Timing

logger = logging.getLogger("django_dbqueue.schedules")

#: Most due schedules one tick fires (the rest wait for the next tick).
DUE_PER_TICK = 100
#: Characters of an error kept on the schedule.
MAX_ERROR = 2000
#: Most on-time slots one tick fires (a one-second cron line and a day of grace: the rest are
#: logged and left out, as catch-up leaves slots out).
ON_TIME_LIMIT = 10_000


def database() -> str:
    return router.db_for_write(Schedule) or DEFAULT_DB_ALIAS


def schedules_exist(using: str) -> bool:
    """Whether any schedule is enabled (declared in code or added in the admin)."""
    return Schedule.objects.using(using).filter(enabled=True).exists()


def db_now(schedule: Schedule, using: str) -> datetime:
    """The database's clock (on a row that exists): slots never come from a host's clock."""
    rows = Schedule.objects.using(using).filter(pk=schedule.pk).annotate(dbqueue_now=DbNow())
    return aware(rows.values_list("dbqueue_now", flat=True).get())


def fire_slot(
    schedule: Schedule,
    slot: datetime,
    enqueue: targets.Enqueue,
    *,
    using: str,
    now: datetime,
    fired_by: str,
    manual: bool = False,
) -> ScheduleFiring | None:
    """Insert the slot's firing and enqueue its job, in one transaction; None when the slot
    was fired already (by another host: its job exists, this one was rolled back)."""
    try:
        with transaction.atomic(using=using):
            # The job first, so the ledger row names it in one INSERT; a lost race on the
            # ledger's key rolls the job back with it.
            job = enqueue(schedule.arguments, schedule.priority)
            firing = ScheduleFiring.objects.using(using).create(
                schedule=schedule,
                slot=slot,
                manual=manual,
                fired_at=now,
                fired_by=fired_by[:255],
                job=job[:255],
            )
    except IntegrityError:
        if ScheduleFiring.objects.using(using).filter(schedule=schedule, slot=slot).exists():
            return None
        raise  # not the ledger's key: the job's own insert failed
    return firing


def fire_due(using: str | None = None, fired_by: str = "") -> int:
    """Fire what is due now on the database clock; return how many jobs were enqueued.

    One indexed query when nothing is due. A schedule that fails is logged and its error
    kept on its row; the others still fire."""
    using = using or database()
    due = (
        Schedule.objects.using(using)
        .filter(enabled=True, next_due__lte=DbNow())
        .annotate(dbqueue_now=DbNow())
        .order_by("next_due")[:DUE_PER_TICK]
    )
    fired = 0
    for schedule in due:
        try:
            fired += fire_schedule(schedule, aware(schedule.dbqueue_now), using, fired_by)
        except (OperationalError, InterfaceError):
            raise  # the database, not this schedule: the ticker backs off
        except Exception:
            logger.exception("schedule %s: not fired this tick", schedule.name)
    return fired


def on_time_window() -> float:
    """Seconds a slot may be late and still count as on time (docs/schedules.md): the grace,
    and never less than two ticks, so a slow tick interval does not make every slot late."""
    return max(settings.SCHEDULE_GRACE, 2 * settings.SCHEDULE_INTERVAL)


def slots_to_fire(schedule: Schedule, timing: Timing, now: datetime) -> tuple[list[datetime], bool]:
    """The due slots a tick at ``now`` fires, oldest first; and whether some were left out.

    While workers run, ticks come about once a DBQUEUE_SCHEDULE_INTERVAL, and a tick finds
    every slot that came due since the tick before it: one, or two or more when the tick
    period drifts against a short slot length, or a tick was slow. Those slots are on time,
    and all of them fire whatever the catch-up policy (``next_due`` is the first slot after
    the previous tick, so its age says how long no tick reached this schedule). Only when the
    oldest due slot is later than the on-time window did no worker tick for that long: the
    slots were missed, and the catch-up policy decides which of them fire."""
    assert schedule.next_due is not None  # the due query asks for next_due <= now
    if (now - schedule.next_due).total_seconds() <= on_time_window():
        return timing.due(schedule.next_due, now, ON_TIME_LIMIT)
    newest = max(schedule.catch_up_limit, 1) if schedule.catch_up == CatchUp.ALL else 1
    slots, left_out = timing.due(schedule.next_due, now, newest)
    if (
        schedule.catch_up == CatchUp.SKIP
        and slots
        and (now - slots[-1]).total_seconds() > settings.SCHEDULE_GRACE
    ):
        slots, left_out = [], True
    return slots, left_out


def fire_schedule(schedule: Schedule, now: datetime, using: str, fired_by: str) -> int:
    try:
        timing = schedule.timing()
    except InvalidSchedule as exc:  # a row edited into nonsense by hand: it stops being due
        _record(schedule, using, f"not fired: {exc}", next_due=None)
        return 0
    slots, left_out = slots_to_fire(schedule, timing, now)
    if left_out:
        logger.info("schedule %s: slots before %s were missed and are not fired (%s)",
                    schedule.name, slots[0] if slots else now, schedule.catch_up)  # fmt: skip
    error = ""
    fired = 0
    try:
        enqueue = targets.resolve(schedule.target, schedule.arguments, using)
    except InvalidSchedule as exc:
        error, slots = f"not fired: {exc}", []
    done = set(
        ScheduleFiring.objects.using(using)
        .filter(schedule=schedule, slot__in=slots)
        .values_list("slot", flat=True)
    )
    for slot in slots:
        if slot in done:
            continue
        try:
            fired += fire_slot(schedule, slot, enqueue, using=using, now=now, fired_by=fired_by) is not None
        except (OperationalError, InterfaceError):
            raise  # the connection or a lock conflict: the slot is tried again next tick
        except Exception as exc:
            logger.exception("schedule %s: the firing of %s failed", schedule.name, slot)
            error = f"the firing of {slot:%Y-%m-%d %H:%M:%S} failed: {describe_error(exc)}"
    if error:
        logger.error("schedule %s: %s", schedule.name, error)
    _advance(schedule, timing, now, slots[-1] if slots else None, error, using)
    return fired


def _advance(
    schedule: Schedule, timing: Timing, now: datetime, newest: datetime | None, error: str, using: str
) -> None:
    """Move ``next_due`` past ``now`` unless another host did, or the timing was edited
    meanwhile (then the edit's own next slot stands)."""
    values: dict[str, object] = {"next_due": timing.next_after(now), "last_error": error[:MAX_ERROR]}
    if newest is not None:
        values["last_slot"] = newest
    Schedule.objects.using(using).filter(
        pk=schedule.pk,
        cron=schedule.cron,
        every=schedule.every,
        timezone=schedule.timezone,
        next_due__lt=values["next_due"],
    ).update(**values)


def _record(schedule: Schedule, using: str, error: str, **values: object) -> None:
    logger.error("schedule %s: %s", schedule.name, error)
    Schedule.objects.using(using).filter(pk=schedule.pk).update(last_error=error[:MAX_ERROR], **values)


def fire_now(schedule: Schedule, fired_by: str, using: str | None = None) -> ScheduleFiring:
    """ "Run now": one extra firing at the database's current time, in the ledger as manual.
    The schedule's own slots are unchanged. InvalidSchedule if its target cannot be used."""
    using = using or schedule._state.db or database()
    enqueue = targets.resolve(schedule.target, schedule.arguments, using)
    now = db_now(schedule, using)
    firing = fire_slot(schedule, now, enqueue, using=using, now=now, fired_by=fired_by, manual=True)
    if firing is None:
        raise InvalidSchedule(f"{schedule.name} was fired at {now} already")
    return firing
