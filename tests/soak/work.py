"""The soak's work items: what each numbered item is (a message or a task, how long it runs,
whether it fails), decided by its number alone, so the publisher, the handlers and the final
accounting agree without sharing anything but the number and the seed.

Even numbers are ``Message`` rows of kind ``soak.work`` (lease mode: at-least-once); odd
numbers are ``django.tasks`` tasks (``TaskRecord``, atomic mode: effects exactly once). Every
handler run writes a ``ChaosLedger`` row, unique per (kind, number, attempt).
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass

MESSAGE_KIND = "soak.work"
LEDGER_MESSAGE = "soak-msg"
LEDGER_TASK = "soak-task"


@dataclass(frozen=True)
class Item:
    n: int
    is_message: bool
    ms: float  # milliseconds the handler sleeps (a call to another service, say)
    fail: str  # "": succeeds; "poison": fails for good; "flaky": the first attempt fails

    @property
    def final_state(self) -> str:
        return "failed" if self.fail == "poison" else "succeeded"


def plan(n: int, seed: int) -> Item:
    rng = random.Random(f"{seed}:{n}")
    r = rng.random()
    ms = rng.uniform(2, 10) if r < 0.85 else rng.uniform(20, 40) if r < 0.99 else 200.0
    is_message = n % 2 == 0
    f = rng.random()
    if f < 0.005:
        fail = "poison"
    elif is_message and f < 0.025:
        fail = "flaky"  # retried by the message's ExponentialBackoff (about 5 s later)
    else:
        fail = ""
    return Item(n, is_message, round(ms, 2), fail)


def run(kind: str, n: int, attempt: int, ms: float, fail: str, worker: str = "") -> None:
    """The handler body of both item kinds: work, write the ledger row, fail if planned."""
    from tests.testapp.models import ChaosLedger

    time.sleep(ms / 1000)
    ChaosLedger.objects.create(kind=kind, job_id=n, attempt=attempt, pid=os.getpid(), worker=worker[:255])
    if fail == "poison":
        raise ValueError(f"soak: item {n} is poison (fails every attempt)")
    if fail == "flaky" and attempt == 1:
        raise ConnectionError(f"soak: item {n} fails its first attempt")
