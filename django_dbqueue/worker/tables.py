"""Set-up checks a worker makes before it consumes anything."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, connections, router

from ..flow.limits import limits_of
from ..queue.history import history_enabled
from ..tables.attempt import QueueAttempt
from ..tables.flow import QueueKeySlot, QueuePause
from ..tables.worker_process import WorkerProcess

#: Tables every worker reads besides its queues: who is alive, what is paused.
FLOW_TABLES = (WorkerProcess, QueuePause)

if TYPE_CHECKING:
    from django.db.models import Model

    from ..models import QueueMixin


def check_tables(models: Sequence[type[QueueMixin]], database: str | None = None) -> None:
    """Fail fast, with the fix in the message, when a queue table (or one of the tables the
    app writes beside it) was never migrated."""
    needed: list[type[Model]] = [*models, *FLOW_TABLES]
    if any(limits_of(model) is not None for model in models):
        needed.append(QueueKeySlot)
    if any(history_enabled(model) for model in models):
        needed.append(QueueAttempt)
    for model in needed:
        using = database or router.db_for_write(model) or DEFAULT_DB_ALIAS
        if model._meta.db_table not in connections[using].introspection.table_names():
            raise ImproperlyConfigured(
                f"the table {model._meta.db_table!r} of {model._meta.label} does not exist "
                f"in database {using!r}: run {missing_table_fix(model)}"
            )


def missing_table_fix(model: type[Model]) -> str:
    """The command that makes a missing table: ``migrate`` when a migration on disk creates it,
    else ``makemigrations <app_label>`` first (``migrate`` alone would answer "No migrations to
    apply", the app's models never having been written into a migration)."""
    from django.db.migrations.loader import MigrationLoader

    label = model._meta.app_label
    try:
        # The migrations on disk only: no database is read, and an app without migrations
        # (no module) counts as having none.
        state = MigrationLoader(None, ignore_no_migrations=True).project_state()
    except Exception:  # a broken migration graph is migrate's to explain  # noqa: BLE001
        return "'manage.py migrate'"
    concrete = model._meta.concrete_model or model
    if (label, concrete._meta.model_name) in state.models:
        return "'manage.py migrate'"
    return f"'manage.py makemigrations {label}', then 'manage.py migrate'"


def has_queue_column(model: type[Model]) -> bool:
    return any(f.name == "queue" for f in model._meta.concrete_fields)
