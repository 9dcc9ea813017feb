"""Message handlers the tests publish to (autodiscovered: a queue_handlers module)."""

from __future__ import annotations

from django_dbqueue.messaging.handlers import handler
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


# A topic with three subscriber groups (docs/messaging.md): each copy writes its group's ledger.
def _subscriber(group: str):
    def consume(message) -> None:
        Ledger.objects.create(
            kind=f"topic.{group}", job_id=message.payload["n"], attempt=message.queue_attempts
        )

    return consume


for _group in ("audit", "billing", "shipping"):
    handler("test.topic", group=_group)(_subscriber(_group))


@handler("test.quote")
def quote(message) -> dict:
    """A request's handler: what it returns is the reply."""
    import os
    import time

    time.sleep(message.payload.get("sleep", 0))
    return {"n": message.payload["n"], "double": message.payload["n"] * 2, "pid": os.getpid()}


@handler("test.refuse")
def refuse(message) -> None:
    from django_dbqueue.exceptions import Discard

    raise Discard("quotes are closed today")


@handler("test.batch_callback")
def batch_callback(message) -> None:
    # One ledger row per delivery of a callback (attempt = the message's pk): a callback
    # fired twice shows as two rows of its kind and batch.
    Ledger.objects.create(
        kind=f"batch-{message.payload['callback']}", job_id=message.payload["batch_id"], attempt=message.pk
    )


@handler("soak.work", schema={"n": int, "ms": (int, float), "fail": str})
def soak_work(message) -> None:
    """The soak's message items (tests/soak/work.py)."""
    from django_dbqueue.exceptions import Discard
    from tests.soak.work import LEDGER_MESSAGE, run

    p = message.payload
    try:
        run(LEDGER_MESSAGE, p["n"], message.queue_attempts, p["ms"], p["fail"], message.queue_locked_by or "")
    except ValueError as exc:  # poison: no retry, FAILED with the reason at once
        raise Discard(str(exc)) from exc
