"""Message handlers the tests publish to (autodiscovered: a queue_handlers module)."""

from __future__ import annotations

from django_dbqueue.handlers import handler
from tests.testapp.models import Ledger


@handler("test.echo")
def echo(message) -> None:
    Ledger.objects.create(kind="message", job_id=message.pk, attempt=message.queue_attempts)


@handler("test.typed", schema={"n": int, "name": str})
def typed(message) -> None:
    Ledger.objects.create(kind="typed", job_id=message.payload["n"], attempt=message.queue_attempts)


@handler("test.flaky")
def flaky(message) -> None:
    if message.queue_attempts < 2:
        raise ConnectionError("smtp server said 421, try again")
