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

        signal_handlers.connect_wakeups()  # PostgreSQL: a new READY row wakes listening workers
        signal_handlers.connect_observability()  # Prometheus counters, trace contexts (if installed)

        # Message handlers live in each app's queue_handlers module.
        autodiscover_modules("queue_handlers")
        if django.VERSION >= (6, 0):  # django.tasks: the runner of TaskRecord, its receivers
            from . import tasks  # noqa: F401
