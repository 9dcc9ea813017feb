"""django.tasks tasks for the backend conformance tests (Django >= 6.0 only)."""

from __future__ import annotations

from django.tasks import task


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
