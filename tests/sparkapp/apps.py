from __future__ import annotations

from django.apps import AppConfig


class SparkAppConfig(AppConfig):
    name = "tests.sparkapp"
    label = "sparkapp"
    default_auto_field = "django.db.models.BigAutoField"
