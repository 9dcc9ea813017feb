from __future__ import annotations

from django.apps import AppConfig


class DbQueueConfig(AppConfig):
    name = "django_dbqueue"
    verbose_name = "Database queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks, signal_handlers  # noqa: F401 - registers checks and receivers
