"""System checks of the ``DBQUEUE_*`` settings, against their declarations in ``conf.py``.

A bad value is reported by ``manage.py check`` (and refused by ``runqueue`` at start-up), so it
never reaches a worker, where it would crash the process again after every restart.

====================  ==========================================================================
id                    what it reports
====================  ==========================================================================
django_dbqueue.E006   a seconds setting that is not a finite number in its range
django_dbqueue.E020   a count, size, length, limit or byte setting that is not an int in its range
django_dbqueue.E021   a flag that is not a real bool (``"no"`` would count as true)
django_dbqueue.E022   ``DBQUEUE_TASK_RETRY`` that is neither None nor a retry policy
django_dbqueue.E023   a path setting that is not a non-empty str or Path
django_dbqueue.E024   ``DBQUEUE_HISTORY_PARTITIONS`` that is not None, "daily" or "monthly"
django_dbqueue.E051   ``DBQUEUE_SCHEDULES`` that is not a dict (its entries: checks.py, E050)
django_dbqueue.E053   ``DBQUEUE_SCHEDULE_TARGETS`` that is not a list of target strings
django_dbqueue.W020   an unknown ``DBQUEUE_*`` name (a typo), with the closest known name
====================  ==========================================================================
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Iterable
from typing import Any

from django.conf import settings as django_settings
from django.core import checks

from .conf import PREFIX, Kind, Setting, Settings
from .retry import RetryPolicy

IDS = {
    Kind.SECONDS: "django_dbqueue.E006",
    Kind.WHOLE: "django_dbqueue.E020",
    Kind.FLAG: "django_dbqueue.E021",
    Kind.RETRY_POLICY: "django_dbqueue.E022",
    Kind.PATH: "django_dbqueue.E023",
    Kind.SCHEDULES: "django_dbqueue.E051",
    Kind.TARGETS: "django_dbqueue.E053",
    Kind.PARTITIONS: "django_dbqueue.E024",
}
UNKNOWN_ID = "django_dbqueue.W020"


def in_range(setting: Setting[Any], number: float) -> bool:
    low = -math.inf if setting.low is None else setting.low
    high = math.inf if setting.high is None else setting.high
    return low <= number <= high


def bounds_text(setting: Setting[Any]) -> str:
    if setting.low is not None and setting.high is not None:
        return f"from {setting.low:g} to {setting.high:g}"
    if setting.low is not None:
        return f"at least {setting.low:g}"
    return ""


def value_problem(setting: Setting[Any], value: object) -> str | None:
    """Why ``value`` cannot be this setting's value (None: it can)."""
    kind = setting.kind
    if value is None and setting.default is None and kind is Kind.SECONDS:
        ok = True  # a seconds setting whose default is None ("derived") takes None back
    elif kind is Kind.SECONDS:
        ok = (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and in_range(setting, value)  # first: math.isfinite(10**400) would raise
            and math.isfinite(value)
        )
    elif kind is Kind.WHOLE:
        ok = isinstance(value, int) and not isinstance(value, bool) and in_range(setting, value)
    elif kind is Kind.FLAG:
        ok = isinstance(value, bool)
    elif kind is Kind.RETRY_POLICY:
        # An instance: the class ExponentialBackoff has the attributes too, and would crash.
        ok = value is None or (isinstance(value, RetryPolicy) and not isinstance(value, type))
    elif kind is Kind.SCHEDULES:
        ok = isinstance(value, dict)
    elif kind is Kind.TARGETS:
        ok = isinstance(value, (list, tuple)) and all(isinstance(target, str) for target in value)
    elif kind is Kind.PARTITIONS:
        ok = value is None or value in ("daily", "monthly")
    else:
        ok = isinstance(value, (str, os.PathLike)) and bool(os.fspath(value))
    if ok:
        return None
    wanted = kind.value
    if kind in (Kind.SECONDS, Kind.WHOLE):
        wanted = f"{wanted} {bounds_text(setting)}"
    if setting.default is None and kind is Kind.SECONDS:
        wanted = f"None or {wanted}"
    return f"{setting.setting_name} must be {wanted}, not {value!r}."


@checks.register()
def check_settings(app_configs: Iterable[Any] | None = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Every declared setting's value, and every ``DBQUEUE_*`` name that is not a setting."""
    declared = Settings.declared()
    messages: list[checks.CheckMessage] = []
    for name, setting in declared.items():
        if not hasattr(django_settings, name):
            continue  # the default, declared valid (tested)
        problem = value_problem(setting, getattr(django_settings, name))
        if problem:
            messages.append(
                checks.Error(
                    problem,
                    hint=f"Remove {name} from your settings to use the default ({setting.default!r}).",
                    id=IDS[setting.kind],
                )
            )
    for name in sorted(n for n in dir(django_settings) if n.startswith(PREFIX) and n not in declared):
        closest = difflib.get_close_matches(name, declared, n=1)
        hint = f"Did you mean {closest[0]}?" if closest else f"Known settings: {', '.join(sorted(declared))}."
        messages.append(
            checks.Warning(
                f"{name} is not a django_dbqueue setting: it has no effect.", hint=hint, id=UNKNOWN_ID
            )
        )
    return messages


def failed_setting_checks() -> list[checks.CheckMessage]:
    """The errors (not warnings) of :func:`check_settings`: what stops ``runqueue`` starting."""
    return [message for message in check_settings() if message.is_serious()]
