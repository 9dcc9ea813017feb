"""Set-up checks a worker makes before it consumes anything."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, connections, router

from ..history import history_enabled
from ..limits import limits_of

#: Tables every worker reads besides its queues: who is alive, what is paused.
FLOW_TABLES = ("WorkerProcess", "QueuePause")

if TYPE_CHECKING:
    from django.db.models import Model

    from ..models import QueueMixin


def check_tables(models: Sequence[type[QueueMixin]], database: str | None = None) -> None:
    """Fail fast, with the fix in the message, when a queue table (or one of the tables the
    app writes beside it) was never migrated."""
    needed: list[type[Model]] = [*models, *(apps.get_model("django_dbqueue", name) for name in FLOW_TABLES)]
    if any(limits_of(model) is not None for model in models):
        needed.append(apps.get_model("django_dbqueue", "QueueKeySlot"))
    if any(history_enabled(model) for model in models):
        needed.append(apps.get_model("django_dbqueue", "QueueAttempt"))
    for model in needed:
        using = database or router.db_for_write(model) or DEFAULT_DB_ALIAS
        if model._meta.db_table not in connections[using].introspection.table_names():
            raise ImproperlyConfigured(
                f"the table {model._meta.db_table!r} of {model._meta.label} does not exist "
                f"in database {using!r}: run 'manage.py migrate'"
            )


def has_queue_column(model: type[Model]) -> bool:
    return any(f.name == "queue" for f in model._meta.concrete_fields)
