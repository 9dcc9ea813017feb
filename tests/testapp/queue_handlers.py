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


@handler("test.batch_callback")
def batch_callback(message) -> None:
    # One ledger row per delivery of a callback (attempt = the message's pk): a callback
    # fired twice shows as two rows of its kind and batch.
    Ledger.objects.create(
        kind=f"batch-{message.payload['callback']}", job_id=message.payload["batch_id"], attempt=message.pk
    )
