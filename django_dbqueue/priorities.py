"""The priority a queue row may have: one check, asked by every call that writes a priority.

Higher runs first. Each queue model has a range (``QueueMixin.queue_priority_range``): a value
outside it is the caller's ``ValueError`` before anything is written, not a ``DataError`` from
the database or a row that fails when it runs.
"""

from __future__ import annotations

from typing import Any

#: Priorities are stored in a 32-bit integer column on every database: the range of a queue
#: model that does not narrow it (``QueueMixin.queue_priority_range``).
PRIORITY_RANGE = (-(2**31), 2**31 - 1)


def priority_range(model: Any = None) -> tuple[int, int]:
    """The lowest and highest priority ``model`` accepts (its ``queue_priority_range``)."""
    return getattr(model, "queue_priority_range", None) or PRIORITY_RANGE


def check_row_priority(row: Any) -> None:
    """The range check for the priority a new row holds (``bulk_enqueue``, ``enqueue()`` of a
    new row). Only an ``int`` is checked: an expression or a NumPy integer goes to the
    database as it always did, rather than becoming a ``TypeError`` here."""
    value = row.queue_priority
    if isinstance(value, int) and not isinstance(value, bool):
        check_priority(value, type(row))


def check_priority(priority: int, model: Any = None) -> int:
    """``priority`` if ``model`` accepts it; else a ``TypeError``/``ValueError`` before anything
    is written. Every path that writes a priority asks here, so a value the column or the
    model's own range refuses (a ``django.tasks`` record's is -100..100) never reaches a row
    that would fail later."""
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise TypeError(f"priority must be an integer, not {priority!r}")
    low, high = priority_range(model)
    if not low <= priority <= high:
        name = f" of {model._meta.label}" if model is not None else ""
        raise ValueError(f"priority{name} must be between {low} and {high}, got {priority}")
    return priority
