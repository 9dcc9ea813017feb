"""Code declarations -> ``Schedule`` rows (at worker start-up), and admin edits of a row.

Code declares; the admin overrides. A field an admin edit set (``enabled``, ``cron``,
``every``, ``timezone``) is listed in the row's ``overrides`` and no later sync changes it;
"revert to code" clears the list. Everything else follows the code on every sync. A
schedule that code no longer declares is disabled, never deleted: its ledger stays.
A new timing (by code or by the admin) starts at its first slot after the change: the
slots of the old timing are not caught up under the new one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, transaction

from ..tables.schedule import OVERRIDABLE, Schedule
from . import targets
from .declare import SETTING, Declaration, declarations
from .firing import database, db_now
from .slots import InvalidSchedule

logger = logging.getLogger("django_dbqueue.schedules")

TIMING_FIELDS = ("cron", "every", "timezone")


@dataclass
class Synced:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    disabled: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def sync(using: str | None = None) -> Synced:
    """Write every code declaration to its row; disable the rows code no longer declares."""
    using = using or database()
    declared, problems = declarations()
    for name, declaration in list(declared.items()):
        try:  # a target that cannot be used is refused here, not at its first firing
            targets.resolve(declaration.target, declaration.arguments, using)
        except InvalidSchedule as exc:
            problems[name] = f"{name}: {exc}"
            del declared[name]
    result = Synced(problems=list(problems.values()))
    for problem in result.problems:
        logger.error("schedule not synced: %s", problem)
    for declaration in declared.values():
        outcome = _sync_one(declaration, using)
        if outcome:
            getattr(result, outcome).append(declaration.name)
    if SETTING in problems:
        return result  # which schedules the setting declares is unknown: disable none
    gone = Schedule.objects.using(using).filter(in_code=True).exclude(name__in=[*declared, *problems])
    for name in gone.values_list("name", flat=True):
        # in_code=True in the filter: a concurrent sync that disabled it first wins.
        if Schedule.objects.using(using).filter(name=name, in_code=True).update(in_code=False, enabled=False):
            logger.warning("schedule %s is no longer declared in code: disabled (its firings are kept)", name)
            result.disabled.append(name)
    return result


def _sync_one(declaration: Declaration, using: str) -> str | None:
    values = declaration.row_values()
    with transaction.atomic(using=using):
        row = Schedule.objects.using(using).select_for_update().filter(name=declaration.name).first()
        if row is None:
            row = Schedule(name=declaration.name, in_code=True, declared=values, **values)
            try:
                with transaction.atomic(using=using):
                    row.save(using=using, force_insert=True)
            except IntegrityError:
                return None  # another worker starting at the same time created it
            restart(row, using)
            return "created"
        changed = [
            name
            for name, value in values.items()
            if name not in row.overrides and getattr(row, name) != value
        ]
        if not changed and row.in_code and row.declared == values:
            return None
        for name in changed:
            setattr(row, name, values[name])
        row.in_code, row.declared = True, values
        row.save(using=using)
        if set(changed) & {*TIMING_FIELDS, "enabled"}:
            restart(row, using)
        return "updated"


def restart(row: Schedule, using: str) -> None:
    """Due at the first slot after now (database clock): after a creation, a new timing, an
    enable. Slots before it are not caught up."""
    row.next_due = row.timing().next_after(db_now(row, using))
    Schedule.objects.using(using).filter(pk=row.pk).update(next_due=row.next_due)


def edited(row: Schedule, changed: list[str], using: str) -> None:
    """After an admin edit saved ``row``: remember what it overrides, restart a new timing."""
    overrides = sorted(set(row.overrides) | (set(changed) & set(OVERRIDABLE)))
    if overrides != row.overrides:
        row.overrides = overrides
        Schedule.objects.using(using).filter(pk=row.pk).update(overrides=overrides)
    if set(changed) & {*TIMING_FIELDS, "enabled"} or row.next_due is None:
        restart(row, using)


def revert_to_code(row: Schedule, using: str) -> bool:
    """Drop the admin's overrides: the code's declaration applies again (False: not in code)."""
    if not row.in_code or not row.declared:
        return False
    declared: dict[str, Any] = row.declared
    timing_changed = any(getattr(row, name) != declared.get(name) for name in (*TIMING_FIELDS, "enabled"))
    for name in OVERRIDABLE:
        setattr(row, name, declared.get(name))
    row.overrides = []
    row.save(using=using)
    if timing_changed:
        restart(row, using)
    return True
