"""The mixin on someone else's model: columns, saving, system checks."""

from __future__ import annotations

from datetime import timedelta

import django
import pytest
from django.core import checks
from django.db import models
from django.test.utils import isolate_apps

from django_dbqueue.checks import _check_model, check_queue_models, check_settings
from django_dbqueue.models import CLAIM_INDEX_FIELDS, QUEUE_FIELDS, QueueMixin
from django_dbqueue.states import QueueState
from tests.testapp.models import Job, Ticket

pytestmark = pytest.mark.django_db(transaction=True)


def test_every_queue_column_is_prefixed_and_present() -> None:
    names = {f.name for f in Ticket._meta.get_fields()}
    assert set(QUEUE_FIELDS) <= names
    assert all(name.startswith("queue_") for name in QUEUE_FIELDS)
    assert any(tuple(i.fields[: len(CLAIM_INDEX_FIELDS)]) == CLAIM_INDEX_FIELDS for i in Ticket._meta.indexes)
    assert Ticket._meta.ordering == ["id"]  # its own Meta composed with ours


def test_a_claimed_instance_saves_its_domain_fields_only() -> None:
    ticket = Ticket.objects.create(subject="old")
    [claimed] = Ticket.objects.claim()
    Ticket.objects.filter(pk=ticket.pk).update(
        queue_locked_until=claimed.queue_locked_until + timedelta(hours=1)
    )
    claimed.subject = "new"
    claimed.save()  # e.g. a handler's self.save() while the keeper renewed the lease
    row = Ticket.objects.get(pk=ticket.pk)
    assert row.subject == "new"
    assert (row.queue_state, row.queue_token) == (QueueState.RUNNING, claimed.queue_token)
    assert row.queue_locked_until == claimed.queue_locked_until + timedelta(hours=1)


def test_handler_save_keeps_the_claim_and_the_outcome_lands() -> None:
    Ticket.objects.create(subject="s")
    [row] = Ticket.objects.claim()
    row.process()  # calls self.save()
    row.mark_succeeded()
    db = Ticket.objects.get(pk=row.pk)
    assert db.handled and db.queue_state == QueueState.SUCCEEDED


def test_named_queue_fields_are_written_on_purpose() -> None:
    ticket = Ticket.objects.create(subject="p")
    ticket.queue_priority = 9
    ticket.save(update_fields=["queue_priority"])
    assert Ticket.objects.get(pk=ticket.pk).queue_priority == 9


def test_installed_models_pass_the_checks() -> None:
    assert check_queue_models() == []


def _ids(messages: list[checks.CheckMessage]) -> set[str]:
    return {m.id for m in messages}


@isolate_apps("tests.testapp")
def test_check_catches_a_meta_that_drops_the_index_and_a_clash() -> None:
    class LostIndex(QueueMixin):
        # Its own Meta without QueueMixin.Meta: the claim index is gone.
        queue_priority = models.CharField(max_length=5)  # and a clashing column

        class Meta:
            app_label = "testapp"

        def process(self) -> None:
            pass

    assert {"django_dbqueue.E002", "django_dbqueue.E003"} <= _ids(_check_model(LostIndex))


@isolate_apps("tests.testapp")
def test_check_catches_bad_class_attributes_and_a_missing_handler() -> None:
    class Misconfigured(QueueMixin):
        queue_retry = "3 times"
        queue_lease = -1

        class Meta(QueueMixin.Meta):
            app_label = "testapp"

    assert {"django_dbqueue.E004", "django_dbqueue.E005", "django_dbqueue.W001"} <= _ids(
        _check_model(Misconfigured)
    )


@isolate_apps("tests.testapp")
def test_check_catches_an_optimistic_group_that_is_not_a_bool_or_has_no_group() -> None:
    class NotABool(QueueMixin):
        queue_atomic = True
        queue_atomic_group = 10
        queue_atomic_group_optimistic = "no"  # would count as true

        class Meta(QueueMixin.Meta):
            app_label = "testapp"

        def process(self) -> None:
            pass

    class NoGroup(QueueMixin):
        queue_atomic = True  # one job per transaction: nothing to be optimistic about
        queue_atomic_group_optimistic = True

        class Meta(QueueMixin.Meta):
            app_label = "testapp"

        def process(self) -> None:
            pass

    assert "django_dbqueue.E009" in _ids(_check_model(NotABool))
    assert _ids(_check_model(NoGroup)) == {"django_dbqueue.W003"}


def test_check_requires_use_tz(settings) -> None:
    settings.USE_TZ = False
    assert "django_dbqueue.E001" in _ids(check_queue_models())


def test_check_command_runs_database_checks() -> None:
    from django.core.management import call_command

    call_command("check", "--database", "default", "--fail-level", "WARNING")


def test_state_sets() -> None:
    from django_dbqueue.states import ACTIVE_STATES, TERMINAL_STATES

    assert not ACTIVE_STATES & TERMINAL_STATES
    assert ACTIVE_STATES | TERMINAL_STATES | {QueueState.IDLE} == set(QueueState)
    assert Job.queue_retry.max_attempts == 3


@pytest.mark.parametrize(
    "value", ["0.1", 0, -5, True, None], ids=["text", "zero", "negative", "bool", "none"]
)
def test_check_catches_a_numeric_setting_that_is_not_a_positive_number(settings, value) -> None:
    settings.DBQUEUE_BATCH_SECONDS = value
    errors = check_settings()
    assert [e.id for e in errors] == ["django_dbqueue.E006"]
    assert "DBQUEUE_BATCH_SECONDS" in errors[0].msg


def test_default_settings_pass_the_settings_check() -> None:
    assert check_settings() == []


@pytest.mark.parametrize(
    ("settings", "use"),
    [
        # A model uses QueueMixin (issue #20, defect 18).
        ("tests.settings_without_app", "a model uses QueueMixin"),
        # Only TASKS names the backend, and an app declares a task (issue #31, item 5: the
        # backend's import crashed the check with InvalidTaskBackend and a traceback).
        pytest.param(
            "tests.settings_tasks_without_app",
            "TASKS['default'] uses django_dbqueue.tasks.DatabaseBackend",
            marks=pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks is Django 6.0+"),
        ),
    ],
)
def test_check_without_the_app_installed_reports_it_instead_of_crashing(settings: str, use: str) -> None:
    """The app must be installed; ``manage.py check`` says so, with the fix, and no traceback."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "DATABASE_URL": "sqlite:///:memory:"}
    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--settings", settings],
        cwd=root / "example_project",
        env={**env, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert f"(django_dbqueue.E000) django_dbqueue is not in INSTALLED_APPS, but {use}." in done.stderr, (
        done.stderr[-2000:]
    )
    assert "HINT: Add 'django_dbqueue' to INSTALLED_APPS" in done.stderr
    assert "Traceback" not in done.stderr


def test_queue_state_carries_no_choices_so_a_new_state_needs_no_migration() -> None:
    """Issue #32: ``choices`` on the mixin's field went into every user app's migrations, so
    a new state needed a migration in each; the validator named there stays the same."""
    field = Job._meta.get_field("queue_state")
    _name, _path, _args, kwargs = field.deconstruct()
    assert "choices" not in kwargs
    assert [f"{v.__module__}.{v.__qualname__}" for v in kwargs["validators"]] == [
        "django_dbqueue.states.validate_queue_state"
    ]


def test_a_bad_queue_state_is_refused_clearly() -> None:
    from django.core.exceptions import ValidationError

    job = Job(queue_state="done")
    with pytest.raises(ValidationError) as refused:
        job.full_clean()
    message = " ".join(refused.value.message_dict["queue_state"])
    assert "'done' is not a queue state" in message and "ready" in message and "cancelled" in message
    for state in QueueState.values:
        Job(queue_state=state).clean_fields()  # every state passes
