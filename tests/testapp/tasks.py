"""django.tasks tasks for the backend conformance tests (Django >= 6.0 only)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.tasks import task
from django.utils import timezone  # noqa: F401 - a name that is not a Task (test_tasks)

from django_dbqueue.retry import ExponentialBackoff
from django_dbqueue.tasks import retry


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


# Retried (a worker SIGKILLed while it ran the task alone would otherwise end it FAILED): a
# poison task fails 4 times, and atomic mode rolls back each failed run's ledger row.
@retry(ExponentialBackoff(base=1, factor=2, max_delay=10, max_attempts=4))
@task(takes_context=True)
def soak_task(context, n: int, ms: float, fail: str) -> None:
    """The soak's task items (tests/soak/work.py): atomic, so a failed run leaves no ledger row."""
    from tests.soak.work import LEDGER_TASK, run

    run(LEDGER_TASK, n, context.attempt, ms, fail)
