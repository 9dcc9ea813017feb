"""The engine's extension points (queue/extensions.py): the wings are registered once the apps
are ready, in one fixed order, and a second ``ready()`` changes nothing."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.apps import apps
from django.core.exceptions import ImproperlyConfigured

from django_dbqueue.composition import hooks
from django_dbqueue.flow import cancellation, limits, pauses
from django_dbqueue.queue import extensions
from django_dbqueue.queue.extensions import ExtensionPoint

#: Point -> the names registered into it, in their order.
EXPECTED = {
    "claim_filters": ["pauses"],
    "claim_gates": ["limits"],
    "enqueue_stamps": ["composition"],
    "keyed_inserts": ["unique"],
    "ended": ["composition"],
    "cancelled_in_claim": ["cancellation"],
    "cancel_requests": ["cancellation"],
    "pause_queue": ["pauses"],
    "resume_queue": ["pauses"],
    "cancel_running": ["cancellation"],
    "enqueue_after": ["chains"],
    "keyed_writes": ["unique"],
    "request_cancel": ["cancellation"],
}


def _registered() -> dict[str, list[str]]:
    return {name: list(getattr(extensions, name)._named) for name in EXPECTED}


def test_the_wings_are_registered_once_the_apps_are_ready() -> None:
    assert _registered() == EXPECTED
    assert list(extensions.claim_filters) == [pauses.unpaused]
    assert list(extensions.claim_gates) == [limits.gate]
    assert list(extensions.ended) == [hooks.finished]
    assert extensions.cancel_running.only() is cancellation.cancel_running


def test_a_second_ready_registers_nothing_twice() -> None:
    apps.get_app_config("django_dbqueue").ready()
    assert _registered() == EXPECTED
    assert list(extensions.ended) == [hooks.finished]


def test_a_point_keeps_the_order_of_first_registration() -> None:
    point: ExtensionPoint[Callable[[], str]] = ExtensionPoint("example")
    point.register("a", lambda: "first")
    point.register("b", lambda: "second")
    point.register("a", lambda: "replaced")
    assert [function() for function in point] == ["replaced", "second"]


def test_a_verb_nobody_registered_names_the_fix() -> None:
    with pytest.raises(ImproperlyConfigured, match="INSTALLED_APPS"):
        ExtensionPoint("pause").only()
