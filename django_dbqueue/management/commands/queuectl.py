"""``manage.py queuectl pause|resume|status``: flow control from a shell (issue #22).

    manage.py queuectl pause shop.Order                         # every host stops claiming
    manage.py queuectl pause django_dbqueue.Message --queue emails
    manage.py queuectl resume shop.Order
    manage.py queuectl status                                   # paused queues, declared limits

A thin shell over :mod:`django_dbqueue.flow.pauses`; an unknown model is a ``CommandError``
(exit status 1) and changes nothing.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS, connections

from django_dbqueue.flow import pauses
from django_dbqueue.flow.limits import limits_of
from django_dbqueue.models import queue_models


class Command(BaseCommand):
    help = (
        "Pause or resume claims from a queue model (or one named queue) on every host; show what is paused."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["pause", "resume", "status"])
        parser.add_argument(
            "models", nargs="*", metavar="app_label.Model", help="Queue models (pause/resume)."
        )
        parser.add_argument("--queue", default="", help="One named queue of a model with a 'queue' column.")
        parser.add_argument("--database", default=None, help="The database alias (default: the router's).")

    def handle(self, *args: Any, **options: Any) -> None:
        action, labels = options["action"], options["models"]
        queue, database = options["queue"], options["database"]
        if database is not None and database not in connections:
            raise CommandError(f"unknown database {database!r}")
        if action == "status":
            self._status(database or DEFAULT_DB_ALIAS)
            return
        if not labels:
            raise CommandError(f"queuectl {action} needs at least one app_label.Model")
        try:
            targets = [pauses.resolve(label) for label in labels]
            for model in targets:  # every name is checked before anything changes
                pauses.is_paused(model, queue, using=database)
        except (ValueError, TypeError) as exc:
            raise CommandError(str(exc)) from None
        for model in targets:
            where = f"{model._meta.label}" + (f" queue {queue!r}" if queue else "")
            if action == "pause":
                changed = pauses.pause(model, queue, using=database, by="queuectl")
                self.stdout.write(f"paused {where}" if changed else f"{where} was already paused")
            else:
                changed = pauses.resume(model, queue, using=database)
                self.stdout.write(f"resumed {where}" if changed else f"{where} was not paused")

    def _status(self, using: str) -> None:
        rows = pauses.pauses(using)
        if not rows:
            self.stdout.write("nothing is paused")
        for row in rows:
            where = f"{row.model}" + (f" queue {row.queue!r}" if row.queue else "")
            since = f"{row.paused_at:%Y-%m-%d %H:%M:%S}"
            self.stdout.write(f"paused {where} since {since} {row.paused_by}".rstrip())
        for model in queue_models():
            declared = limits_of(model)
            if declared is None:
                continue
            parts = []
            if declared.concurrency is not None:
                parts.append(f"{declared.concurrency} running")
            if declared.rate is not None and declared.period is not None:
                parts.append(f"{declared.rate} claims per {declared.period.total_seconds():g} s")
            self.stdout.write(f"limits {model._meta.label} per {declared.key}: {', '.join(parts)}")
