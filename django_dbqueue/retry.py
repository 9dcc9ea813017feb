"""Retry policies: small, pure and clock-free.

A policy answers one question: after a row failed its ``attempts``-th attempt with
``error``, how long until the next one, or ``None`` to give up (the row ends FAILED).
Delays are relative, so the worker adds them to the *database* clock, never its own.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable

from .exceptions import Discard, JobTimeout, Retry
from .queue.lease import as_timedelta


@runtime_checkable
class RetryPolicy(Protocol):
    @property
    def max_attempts(self) -> int | None:
        """Attempts a row gets in all (None: unlimited). The lease rescue reads it too."""
        ...

    def delay(self, attempts: int, error: BaseException | None) -> timedelta | None:
        """Delay before attempt ``attempts + 1``, or None to give up."""
        ...


def next_run_at(
    policy: RetryPolicy, attempts: int, error: BaseException | None, now: datetime
) -> datetime | None:
    """When the next attempt is due, measured from ``now`` (None: give up)."""
    wait = policy.delay(attempts, error)
    return None if wait is None else now + wait


def _retryable(error: BaseException | None, retry_on: tuple[type[BaseException], ...]) -> bool:
    # A timeout is a failed attempt like any other (retried up to max_attempts), although
    # it is a BaseException so that handlers cannot swallow it.
    return error is None or isinstance(error, (*retry_on, JobTimeout))


@dataclass(frozen=True)
class ExponentialBackoff:
    """``delay = min(base * factor ** (attempts - 1), max_delay)``, then ± ``jitter``.

    >>> policy = ExponentialBackoff(base=5, factor=2, max_delay=3600, max_attempts=None, jitter=0)
    >>> [policy.delay(n, None).total_seconds() for n in (1, 2, 3, 12)]
    [5.0, 10.0, 20.0, 3600.0]
    >>> ExponentialBackoff(max_attempts=3).delay(3, None) is None
    True

    Jitter spreads retries of rows that failed together (an outage) so they do not
    come back as one thundering herd. Only errors of ``retry_on`` are retried.
    """

    base: float = 5.0
    factor: float = 2.0
    max_delay: float = 3600.0
    max_attempts: int | None = 8
    jitter: float = 0.1
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.base < 0 or self.factor < 1 or self.max_delay < 0:
            raise ValueError("ExponentialBackoff needs base >= 0, factor >= 1, max_delay >= 0")
        if not 0 <= self.jitter < 1:
            raise ValueError("ExponentialBackoff.jitter must be in [0, 1)")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError("ExponentialBackoff.max_attempts must be >= 1 or None")

    def delay(self, attempts: int, error: BaseException | None) -> timedelta | None:
        if self.max_attempts is not None and attempts >= self.max_attempts:
            return None
        if not _retryable(error, self.retry_on):
            return None
        # Cap the exponent first: factor ** attempts overflows a float long before
        # max_attempts=None rows stop failing.
        exponent = min(max(attempts - 1, 0), 64)
        seconds = min(self.base * self.factor**exponent, self.max_delay)
        if self.jitter:
            seconds *= 1 + self.rng.uniform(-self.jitter, self.jitter)
        return timedelta(seconds=seconds)


@dataclass(frozen=True)
class Fixed:
    """The same ``delay`` (seconds) before every retry.

    >>> Fixed(delay_seconds=30, max_attempts=3).delay(1, None)
    datetime.timedelta(seconds=30)
    """

    delay_seconds: float = 60.0
    max_attempts: int | None = 5
    retry_on: tuple[type[BaseException], ...] = (Exception,)

    def delay(self, attempts: int, error: BaseException | None) -> timedelta | None:
        if self.max_attempts is not None and attempts >= self.max_attempts:
            return None
        if not _retryable(error, self.retry_on):
            return None
        return timedelta(seconds=self.delay_seconds)


@dataclass(frozen=True)
class NoRetry:
    """Fail for good on the first error.

    >>> NoRetry().delay(1, ValueError()) is None
    True
    """

    max_attempts: int | None = 1

    def delay(self, attempts: int, error: BaseException | None) -> timedelta | None:
        return None


def retry_at(
    policy: RetryPolicy, attempts: int, error: BaseException | str, now: datetime
) -> datetime | None:
    """When a row whose ``attempts``-th attempt failed with ``error`` runs again (None: it ends
    FAILED). :class:`Discard` ends it; ``Retry(delay=…)`` names its own delay, still within
    ``max_attempts``; anything else is the policy's to decide."""
    if isinstance(error, Discard):
        return None
    if isinstance(error, Retry) and error.delay is not None:
        if policy.max_attempts is not None and attempts >= policy.max_attempts:
            return None
        return now + as_timedelta(error.delay, "Retry.delay")
    return next_run_at(policy, attempts, error if isinstance(error, BaseException) else None, now)
