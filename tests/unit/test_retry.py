from __future__ import annotations

import doctest
import random
from datetime import datetime, timedelta

import pytest

from django_dbqueue import retry
from django_dbqueue.compat import UTC
from django_dbqueue.retry import ExponentialBackoff, Fixed, NoRetry, RetryPolicy, next_run_at


def test_docstring_examples_hold() -> None:
    result = doctest.testmod(retry)
    assert result.attempted >= 5
    assert result.failed == 0


def test_exponential_backoff_grows_caps_and_gives_up() -> None:
    policy = ExponentialBackoff(base=2, factor=3, max_delay=50, max_attempts=5, jitter=0)
    assert [policy.delay(n, ValueError()).total_seconds() for n in (1, 2, 3, 4)] == [2, 6, 18, 50]
    assert policy.delay(5, ValueError()) is None


def test_jitter_stays_within_bounds_and_is_seeded() -> None:
    policy = ExponentialBackoff(base=100, factor=1, jitter=0.1, rng=random.Random(7))
    delays = [policy.delay(1, None).total_seconds() for _ in range(200)]
    assert min(delays) >= 90 and max(delays) <= 110
    assert len(set(delays)) > 100  # really spread, not a constant
    again = ExponentialBackoff(base=100, factor=1, jitter=0.1, rng=random.Random(7))
    assert [again.delay(1, None).total_seconds() for _ in range(200)] == delays


def test_unlimited_attempts_do_not_overflow() -> None:
    policy = ExponentialBackoff(max_attempts=None, jitter=0, max_delay=60)
    assert policy.delay(10_000, None) == timedelta(seconds=60)


def test_only_retry_on_errors_are_retried() -> None:
    policy = ExponentialBackoff(retry_on=(ConnectionError,), jitter=0)
    assert policy.delay(1, ConnectionError()) is not None
    assert policy.delay(1, KeyError()) is None
    assert Fixed(delay_seconds=1, retry_on=(ConnectionError,)).delay(1, KeyError()) is None


def test_next_run_at_is_relative_to_the_given_clock() -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    assert next_run_at(Fixed(delay_seconds=30), 1, None, now) == now + timedelta(seconds=30)
    assert next_run_at(NoRetry(), 1, None, now) is None


@pytest.mark.parametrize("policy", [ExponentialBackoff(), Fixed(), NoRetry()])
def test_policies_satisfy_the_protocol(policy: RetryPolicy) -> None:
    assert isinstance(policy, RetryPolicy)


@pytest.mark.parametrize("kwargs", [{"base": -1}, {"factor": 0.5}, {"jitter": 1.5}, {"max_attempts": 0}])
def test_bad_backoff_arguments_are_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        ExponentialBackoff(**kwargs)
