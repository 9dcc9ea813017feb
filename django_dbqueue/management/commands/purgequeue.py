"""``manage.py purgequeue``: delete (or archive) finished queue-owned rows and old attempts,
in small batches by primary key, so the hot tables stay small without long locks. A purged
row's workflow checkpoints, events and progress go in its batch; ``--workflow-orphans``
sweeps those whose row went some other way (workflows/purge.py)."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any

from django.apps import apps
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections, router, transaction
from django.db.models import Model, QuerySet

from django_dbqueue.backends import db_now_plus
from django_dbqueue.management.arguments import duration, pause_seconds, whole_number
from django_dbqueue.models import (
    ArchivedMessage,
    Batch,
    JobWait,
    Message,
    QueueAttempt,
    QueueMixin,
    Reply,
    ScheduleFiring,
    TaskRecord,
)
from django_dbqueue.queue import partitions
from django_dbqueue.states import QueueState
from django_dbqueue.workflows import purge as workflow_purge

#: Models whose rows belong to the queue itself. Domain rows (an Order) are never deleted.
OWNED = (Message, TaskRecord)
batch_size = whole_number(1, 100_000)
#: The options that say what to purge, by age.
AGES = ("older_than", "attempts_older_than", "firings_older_than", "composition_older_than")
#: Every option that says what to purge.
WHAT = (*AGES, "workflow_orphans")


class Command(BaseCommand):
    help = (
        "Delete finished Message/TaskRecord rows older than --older-than, and QueueAttempt "
        "history older than --attempts-older-than, in bounded batches; --workflow-orphans deletes "
        "workflow checkpoints whose row is gone."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "models",
            nargs="*",
            metavar="app_label.Model",
            help="django_dbqueue.Message and/or django_dbqueue.TaskRecord (default both).",
        )
        parser.add_argument(
            "--older-than",
            type=duration,
            default=None,
            help="Finished rows whose queue_finished_at is older than this (e.g. 7d; at most 365000d).",
        )
        parser.add_argument(
            "--include-failed",
            action="store_true",
            help="Also purge FAILED rows (default: succeeded and cancelled only).",
        )
        parser.add_argument(
            "--archive",
            action="store_true",
            help="Move purged messages to ArchivedMessage instead of deleting them.",
        )
        parser.add_argument(
            "--attempts-older-than",
            type=duration,
            default=None,
            help="Delete QueueAttempt history older than this: partitions wholly older are dropped "
            "(a partitioned table, partitionhistory), the rest deleted in batches.",
        )
        parser.add_argument(
            "--firings-older-than",
            type=duration,
            default=None,
            help="Delete the schedules' ledger rows (ScheduleFiring) fired longer ago than this.",
        )
        parser.add_argument(
            "--composition-older-than",
            type=duration,
            default=None,
            help="Delete batches that completed, and the waits (with their edges) of jobs promoted, "
            "longer ago than this.",
        )
        parser.add_argument(
            "--workflow-orphans",
            action="store_true",
            default=None,
            help="Delete workflow checkpoints, events and progress whose queue row is gone (deleted "
            "by raw SQL or before purging removed them), reading the workflow tables in batches.",
        )
        parser.add_argument("--batch-size", type=batch_size, default=1000)
        parser.add_argument(
            "--pause",
            type=pause_seconds,
            default=0.05,
            help="Seconds to sleep between batches, so workers get the locks in between (0 to 3600).",
        )
        parser.add_argument("--dry-run", action="store_true", help="Count only.")
        parser.add_argument("--database", default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        if all(options[name] is None for name in WHAT):
            wanted = " and/or ".join("--" + name.replace("_", "-") for name in WHAT)
            raise CommandError(f"Nothing to do: give {wanted}.")
        if options["database"] and options["database"] not in connections:
            raise CommandError(f"Unknown database alias {options['database']!r}.")
        models = self._models(options["models"])
        states = [QueueState.SUCCEEDED, QueueState.CANCELLED]
        if options["include_failed"]:
            states.append(QueueState.FAILED)
        if options["older_than"] is not None:
            for model in models:
                using = options["database"] or router.db_for_write(model)
                rows: QuerySet[Any] = model._base_manager.using(using).filter(
                    queue_state__in=states, queue_finished_at__lt=db_now_plus(-options["older_than"])
                )
                archive = options["archive"] and model is Message
                done = self._purge(rows, options, archive=archive)
                verb = "to purge" if options["dry_run"] else "archived" if archive else "deleted"
                self.stdout.write(f"{model._meta.label}: {done} finished row(s) {verb}")
            # Reply slots whose caller stopped waiting without removing them (it died).
            using = options["database"] or router.db_for_write(Reply)
            slots = Reply.objects.using(using).filter(expires_at__lt=db_now_plus(timedelta(0)))
            done = self._purge(slots, options, archive=False)
            self.stdout.write(
                f"Reply: {done} expired reply slot(s) {'to purge' if options['dry_run'] else 'deleted'}"
            )
        # A slot's ledger row only guards it while hosts may still fire it: ticks compute
        # slots from next_due onwards, so rows of past slots can go.
        ledgers: tuple[tuple[type[Model], str, str, str], ...] = (
            (QueueAttempt, "finished_at", "attempts_older_than", "attempt"),
            (ScheduleFiring, "fired_at", "firings_older_than", "firing"),
            # A completed batch's counters and a promoted job's wait are read by nothing more:
            # an outcome of a member whose batch is gone changes nothing (composition._count).
            (Batch, "complete_fired_at", "composition_older_than", "completed batch"),
            (JobWait, "promoted_at", "composition_older_than", "promoted job's wait"),
        )
        for table, field, option, noun in ledgers:
            if options[option] is not None:
                using = options["database"] or router.db_for_write(table)
                cutoff: Any = db_now_plus(-options[option])
                if table is QueueAttempt:
                    cutoff = self._rotate(using, options)
                rows = table._default_manager.using(using).filter(**{f"{field}__lt": cutoff})
                done = self._purge(rows, options, archive=False)
                verb = "to purge" if options["dry_run"] else "deleted"
                self.stdout.write(f"{table.__name__}: {done} {noun}(s) {verb}")
        if options["workflow_orphans"]:
            self._sweep_workflows(options)

    def _sweep_workflows(self, options: dict[str, Any]) -> None:
        using = options["database"] or router.db_for_write(workflow_purge.TABLES[0])
        swept = workflow_purge.sweep_orphans(
            using, options["batch_size"], options["pause"], dry_run=options["dry_run"]
        )
        verb = "to purge" if options["dry_run"] else "deleted"
        for table, done in swept.deleted.items():
            self.stdout.write(f"{table}: {done} row(s) of workflow rows that are gone {verb}")
        for label in sorted(swept.unknown):
            self.stdout.write(f"{label} is not an installed model: its workflow rows were kept")

    def _rotate(self, using: str, options: dict[str, Any]) -> datetime:
        """Drop the history partitions wholly older than the cutoff (one DDL each, after making
        the partitions due ahead); return the cutoff, on the database clock, for the rest."""
        try:
            cutoff = partitions.db_now(using) - options["attempts_older_than"]
            if not options["dry_run"]:
                partitions.make_ahead(using)
            started = time.monotonic()
            dropped = partitions.rotate(using, cutoff, dry_run=options["dry_run"])
            took = time.monotonic() - started
        except partitions.PartitioningUnsupported as exc:
            raise CommandError(str(exc)) from None
        if dropped:
            known = [p.rows for p in dropped if p.rows is not None]
            rows = f"; ~{sum(known):,} rows by the database's estimate" if len(known) == len(dropped) else ""
            verb = "to drop" if options["dry_run"] else f"dropped in {took:.2f}s"
            names = ", ".join(p.name for p in dropped)
            self.stdout.write(
                f"QueueAttempt: {len(dropped)} partition(s) wholly older than the cutoff {verb} "
                f"({names}{rows})"
            )
        return cutoff

    def _models(self, labels: list[str]) -> list[type[QueueMixin]]:
        if not labels:
            return list(OWNED)
        found = []
        for label in labels:
            try:
                model = apps.get_model(label)
            except (LookupError, ValueError):
                raise CommandError(f"Unknown model {label!r}.") from None
            if model not in OWNED:
                owned = ", ".join(m._meta.label for m in OWNED)
                raise CommandError(
                    f"{label}: purgequeue only deletes rows the queue owns ({owned}); "
                    "domain rows such as orders are yours to keep or delete."
                )
            found.append(model)
        return found

    def _purge(self, rows: Any, options: dict[str, Any], *, archive: bool) -> int:
        if options["dry_run"]:
            return rows.count()
        size, pause, done = options["batch_size"], options["pause"], 0
        while True:
            # No ORDER BY: LIMIT stops the index range scan early; then delete by primary key,
            # which locks exactly those rows and nothing around them.
            with transaction.atomic(using=rows.db):
                if archive:
                    batch = list(rows[:size])
                    ids = [m.pk for m in batch]
                    ArchivedMessage.objects.using(rows.db).bulk_create(
                        ArchivedMessage.from_message(m) for m in batch
                    )
                else:
                    ids = list(rows.values_list("pk", flat=True)[:size])
                if ids:
                    # The history's delete repeats the time condition: on a partitioned table
                    # it keeps the statement to the partitions below the cutoff.
                    target = rows if rows.model is QueueAttempt else rows.model._base_manager.using(rows.db)
                    target.filter(pk__in=ids).delete()
                    if issubclass(rows.model, QueueMixin):
                        # A message's workflow (a handler can be one) goes with it, in this
                        # batch: a later row with its pk must not replay its checkpoints.
                        workflow_purge.delete_for(rows.model, ids, rows.db)
            done += len(ids)
            if len(ids) < size:
                return done
            time.sleep(pause)
