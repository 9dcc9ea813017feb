from __future__ import annotations

import django
from django.apps import AppConfig


class DbQueueConfig(AppConfig):
    name = "django_dbqueue"
    verbose_name = "Database queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.utils.module_loading import autodiscover_modules

        from . import checks, signal_handlers  # noqa: F401 - registers checks and receivers
        from .composition import extensions as composition
        from .fairness import extensions as fairness
        from .flow import extensions as flow

        # The feature wings into the engine's extension points (queue/extensions.py), here and
        # in this order: every process (web, worker, command) runs ready() before it claims.
        fairness.register()
        flow.register()
        composition.register()

        signal_handlers.connect_wakeups()  # PostgreSQL: a new READY row wakes listening workers
        signal_handlers.connect_observability()  # Prometheus counters, trace contexts (if installed)
        signal_handlers.connect_workflow_cleanup()  # a deleted workflow row takes its checkpoints along

        # Message handlers live in each app's queue_handlers module.
        autodiscover_modules("queue_handlers")
        if django.VERSION >= (6, 0):  # django.tasks: the runner of TaskRecord, its receivers
            from .tasks import backend  # noqa: F401
