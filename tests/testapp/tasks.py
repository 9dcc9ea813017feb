"""django.tasks tasks for the backend conformance tests (Django >= 6.0 only)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.tasks import task
from django.utils import timezone  # noqa: F401 - a name that is not a Task (test_tasks)


@task
def add(a: int, b: int) -> int:
    return a + b


@task(priority=5, queue_name="other")
def shout(text: str) -> str:
    return text.upper()


@task
def explode(reason: str) -> None:
    raise ValueError(reason)


@task(takes_context=True)
def which_attempt(context) -> int:
    return context.attempt


@task
async def async_double(n: int) -> int:
    return n * 2


#: Callables ``peek`` calls with its context while it runs (a test looks from inside).
PEEKS: list[Callable[[Any], None]] = []


@task(takes_context=True)
def peek(context) -> None:
    for look in PEEKS:
        look(context)


@task
def batch_done(batch_id: int, callback: str) -> str:
    """A batch callback (test_composition): called with the batch and which callback fired."""
    return f"{callback} {batch_id}"
