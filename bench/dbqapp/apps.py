from __future__ import annotations

from django.apps import AppConfig


class DbqAppConfig(AppConfig):
    name = "bench.dbqapp"
    label = "dbqapp"
    verbose_name = "django_dbqueue benchmark"

    def ready(self) -> None:
        from bench import querycount, stmtcount

        querycount.install()
        stmtcount.install()
