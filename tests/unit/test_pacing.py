"""The idle loop's waits (django_dbqueue.worker.pacing): warm after work, cold backing off to
the poll interval, and no warm speed with notifications."""

from __future__ import annotations

import pytest

from django_dbqueue.worker import pacing
from django_dbqueue.worker.pacing import IdlePacing


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(pacing.time, "monotonic", fake)
    return fake


def test_a_worker_that_never_worked_backs_off_to_the_poll_interval(clock: Clock) -> None:
    paced = IdlePacing(0.045)
    waits = [paced.next_wait() for _ in range(6)]
    assert waits == pytest.approx([0.005625, 0.01125, 0.0225, 0.045, 0.045, 0.045])


def test_after_work_it_polls_warm_for_the_window_then_backs_off_from_the_shortest(clock: Clock) -> None:
    paced = IdlePacing(0.045)
    for _ in range(5):
        paced.next_wait()
    paced.worked()
    clock.now += 0.5
    assert [paced.next_wait() for _ in range(3)] == pytest.approx([0.005] * 3)
    clock.now += pacing.WARM_WINDOW
    assert [paced.next_wait() for _ in range(5)] == pytest.approx([0.005625, 0.01125, 0.0225, 0.045, 0.045])


def test_a_wake_up_restarts_the_backoff(clock: Clock) -> None:
    paced = IdlePacing(0.045)
    for _ in range(5):
        paced.next_wait()
    paced.woken()
    assert paced.next_wait() == pytest.approx(0.005625)


def test_with_notifications_there_is_no_warm_speed_and_the_net_is_a_second_apart(clock: Clock) -> None:
    paced = IdlePacing(0.045, listening=lambda: True)
    paced.worked()
    waits = [paced.next_wait() for _ in range(12)]
    assert waits[0] == pytest.approx(0.005625)
    assert max(waits) == pytest.approx(pacing.LISTENING_CEILING)


def test_no_wait_is_shorter_than_the_floor(clock: Clock) -> None:
    paced = IdlePacing(0.01)
    paced.worked()
    assert paced.next_wait() == pacing.SHORTEST
    assert paced.shortest() == pacing.SHORTEST
