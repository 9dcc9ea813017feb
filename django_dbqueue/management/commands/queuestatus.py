"""``manage.py queuestatus``: the queue at a glance in a terminal; ``--watch`` refreshes it."""

from __future__ import annotations

import time
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS, connections

from django_dbqueue.management.arguments import seconds_between, whole_number
from django_dbqueue.observability.status import alive_workers, model_status, render
from django_dbqueue.worker.tables import check_tables

from .runqueue import resolve_models

#: Clears a terminal and puts the cursor home (ANSI), so a watch redraws in place.
CLEAR = "\x1b[H\x1b[2J"


class Command(BaseCommand):
    help = "Show per queue model the rows ready, running and failed, the oldest wait, rates and workers."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "models",
            nargs="*",
            metavar="app_label.Model",
            help="Queue models (default: every installed one).",
        )
        parser.add_argument("--watch", action="store_true", help="Refresh until interrupted (Ctrl-C).")
        parser.add_argument(
            "--interval",
            type=seconds_between(0.1, 3600),
            default=2.0,
            help="Seconds between refreshes with --watch, 0.1 to 3600 (default 2).",
        )
        parser.add_argument(
            "--count",
            type=whole_number(1),
            default=None,
            help="With --watch: stop after this many refreshes.",
        )
        parser.add_argument("--database", default=None, help="Database alias (default: the router's choice).")

    def handle(self, *args: Any, **options: Any) -> None:
        models = resolve_models(options["models"])
        database = options["database"]
        if database is not None and database not in connections:
            raise CommandError(f"Unknown database alias {database!r}.")
        if options["count"] is not None and not options["watch"]:
            raise CommandError("--count is for --watch.")
        try:
            check_tables(models, database)
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from exc
        refreshes = 0
        clear = options["watch"] and self.stdout.isatty()
        try:
            while True:
                statuses = [model_status(model, database) for model in models]
                frame = render(statuses, alive_workers(database or DEFAULT_DB_ALIAS))
                self.stdout.write((CLEAR if clear else "") + frame, ending="")
                refreshes += 1
                if not options["watch"] or refreshes == options["count"]:
                    return
                self.stdout.flush()
                time.sleep(options["interval"])
                if not clear:
                    self.stdout.write("")
        except KeyboardInterrupt:
            return
