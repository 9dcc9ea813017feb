"""``manage.py runqueue``: run queue workers. Thin: parse, validate, hand over to Supervisor."""

from __future__ import annotations

import logging
import shutil
import sys
from collections.abc import Callable
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS, DatabaseError, InterfaceError, OperationalError, connections, router

from django_dbqueue.conf import Settings, settings
from django_dbqueue.management.arguments import (
    lease_seconds,
    poll_seconds,
    queue_name,
    setting_range,
    whole_number,
    worker_id,
)
from django_dbqueue.models import QueueMixin, queue_model, queue_models
from django_dbqueue.settings_checks import failed_setting_checks
from django_dbqueue.worker import startup
from django_dbqueue.worker.loop import Worker
from django_dbqueue.worker.sessions import room_warning
from django_dbqueue.worker.stats import WorkerStats
from django_dbqueue.worker.supervisor import Supervisor
from django_dbqueue.worker.tables import has_queue_column

positive_int = whole_number(1)
#: ``--batch-size``: the range of ``DBQUEUE_BATCH_SIZE`` (a LIMIT the databases can take).
batch_size = whole_number(*(int(bound) for bound in setting_range(Settings.BATCH_SIZE)))


def resolve_models(labels: list[str]) -> list[type[QueueMixin]]:
    if not labels:
        found = queue_models()
        if not found:
            raise CommandError("No QueueMixin models are installed: nothing to consume.")
        return found
    try:
        return [queue_model(label) for label in labels]
    except ValueError as exc:
        raise CommandError(f"{str(exc)[0].upper()}{str(exc)[1:]}.") from None


def refuse_bad_settings() -> None:
    """Start no worker on settings that fail their checks: a worker would crash on them and be
    replaced, again and again. (``call_command()`` skips the system checks by default.)"""
    failed = failed_setting_checks()
    if failed:
        lines = "\n".join(f"  {message.id}: {message.msg}" for message in failed)
        raise CommandError(f"runqueue will not start: the settings fail their checks:\n{lines}")


class Command(BaseCommand):
    help = "Process queued rows of QueueMixin models until stopped (or drained, with --burst)."

    def run_from_argv(self, argv: list[str]) -> None:
        # First thing (before the system checks): a SIGTERM from now on is a graceful stop,
        # not death by -15 (the package's import did it already for `manage.py runqueue`).
        startup.hold_stop_signals(argv)
        super().run_from_argv(argv)

    def check(self, *args: Any, databases: Any = None, **kwargs: Any) -> None:
        """The system checks, also while the database is down.

        Since Django 6.1 the checks run each field's database-specific checks against every
        database, and on MySQL/MariaDB those connect (a field's column type depends on the server).
        A worker started before its database must wait for it (the supervisor does), not die
        here: if the database does not answer, run the checks that do not need it."""
        try:
            super().check(*args, **{**kwargs, "databases": databases})
        except (OperationalError, InterfaceError):
            if databases:
                raise
            super().check(*args, **{**kwargs, "databases": []})

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "models",
            nargs="*",
            metavar="app_label.Model",
            help="Queue models to consume (default: every installed one).",
        )
        parser.add_argument(
            "--concurrency", type=positive_int, default=1, help="Worker processes to run (default 1)."
        )
        parser.add_argument(
            "--batch-size",
            type=batch_size,
            default=None,
            help=(
                "Rows claimed at once (default: as many as fit in DBQUEUE_BATCH_SECONDS of work by the"
                f" time the jobs took, at most {settings.BATCH_SIZE}; the first claim 100, atomic models"
                " 10 or their group)."
            ),
        )
        parser.add_argument(
            "--burst",
            action="store_true",
            help="Drain what is due, then exit (a progress bar on a terminal).",
        )
        parser.add_argument(
            "--max-jobs",
            type=positive_int,
            default=None,
            help="Each worker process exits after this many jobs.",
        )
        parser.add_argument(
            "--poll-interval",
            type=poll_seconds,
            default=None,
            help=f"Longest idle wait between polls in seconds, 0.01 to 3600 "
            f"(default {settings.POLL_INTERVAL}).",
        )
        parser.add_argument(
            "--lease",
            type=lease_seconds,
            default=None,
            help="Seconds a claim is valid unless renewed, 1 to 604800 (7 days) "
            "(default: the model's queue_lease).",
        )
        parser.add_argument(
            "--worker-id",
            type=worker_id,
            default=None,
            help="Name shown in queue_locked_by (default host:pid; '-N' is appended per process).",
        )
        parser.add_argument(
            "--database", default=None, help="Database alias to consume from (default: the router's choice)."
        )
        parser.add_argument(
            "--queue",
            action="append",
            type=queue_name,
            default=None,
            help="Consume only this queue of models with a queue column (Message, tasks); repeatable.",
        )
        parser.add_argument(
            "--metrics-port",
            type=whole_number(1, 65535),
            default=None,
            help="Serve Prometheus metrics of all the worker processes on this port (the [metrics] extra).",
        )
        parser.add_argument(
            "--metrics-address",
            default="127.0.0.1",
            help="Address --metrics-port listens on (default 127.0.0.1, this host only; 0.0.0.0 for every "
            "interface). When $DBQUEUE_METRICS_TOKEN is set, a scrape must present that token.",
        )
        parser.add_argument("--no-progress", action="store_true", help="No progress bar with --burst.")
        parser.add_argument(
            "--no-schedules",
            action="store_true",
            help="Fire no schedules here (by default the first worker process fires what is due, ~1/s).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        refuse_bad_settings()
        models = resolve_models(options["models"])
        if options["queue"]:
            if options["models"]:
                lacking = [m._meta.label for m in models if not has_queue_column(m)]
                if lacking:
                    raise CommandError(f"--queue: {', '.join(lacking)} has no 'queue' column.")
            models = [m for m in models if has_queue_column(m)]
        database = options["database"]
        if database is not None and database not in connections:
            raise CommandError(f"Unknown database alias {database!r}.")
        self._configure_logging(options["verbosity"])
        progress = options["burst"] and not options["no_progress"] and sys.stderr.isatty()
        worker_options = {
            "models": models,
            "batch_size": options["batch_size"],
            "burst": options["burst"],
            "max_jobs": options["max_jobs"],
            "poll_interval": options["poll_interval"],
            "lease": options["lease"],
            "worker_id": options["worker_id"],
            "database": database,
            "queues": options["queue"],
            "schedules": not options["no_schedules"],
        }
        try:
            if any(connections[alias].in_atomic_block for alias in connections):
                # Called inside a transaction (a TestCase): worker processes of their own
                # could not see its rows, so the one worker runs here, in it.
                if options["concurrency"] != 1 or options["metrics_port"]:
                    raise CommandError(
                        "inside a transaction (e.g. a TestCase) runqueue runs one worker, "
                        "without --metrics-port."
                    )
                totals = Worker(**worker_options, handle_signals=False).run()
            else:
                self._warn_about_sessions(
                    options["concurrency"],
                    database or router.db_for_write(models[0]) or DEFAULT_DB_ALIAS,
                    options["burst"],
                    not options["no_schedules"],
                )
                supervisor = Supervisor(
                    concurrency=options["concurrency"],
                    worker_options=worker_options,
                    progress=progress,
                    stdout=sys.stderr,
                )
                totals = self._with_metrics(options, worker_options, supervisor.run)
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from exc
        if options["verbosity"] >= 1:
            self.stdout.write(
                f"runqueue: {totals.succeeded} succeeded, {totals.failed} failed attempts, "
                f"{totals.released} given back, {totals.lost} late outcomes rejected, "
                f"{totals.rescued} rescued"
            )

    @staticmethod
    def _with_metrics(
        options: dict[str, Any], worker_options: dict[str, Any], run: Callable[[], WorkerStats]
    ) -> WorkerStats:
        """Run the workers, with an exporter of their metrics if ``--metrics-port`` asks."""
        if not options["metrics_port"]:
            return run()
        # Only here: prometheus_client is imported by the exporter, not by every runqueue.
        from django_dbqueue.observability.exporter import Exporter, prepare_multiprocess

        made = prepare_multiprocess()
        exporter = Exporter(
            options["metrics_port"], options["metrics_address"], worker_options["models"], options["database"]
        )
        exporter.start()
        try:
            return run()
        finally:
            exporter.stop()
            if made:
                shutil.rmtree(made, ignore_errors=True)

    def _warn_about_sessions(self, concurrency: int, using: str, burst: bool, schedules: bool) -> None:
        try:
            warning = room_warning(concurrency, using, burst, schedules)
        except DatabaseError:
            return  # the database is not up yet: the supervisor waits for it
        finally:
            connections.close_all()  # before the supervisor forks its workers
        if warning:
            self.stderr.write(self.style.WARNING(f"Warning: {warning}"))

    @staticmethod
    def _configure_logging(verbosity: int) -> None:
        level = {0: logging.ERROR, 1: logging.INFO, 2: logging.INFO}.get(verbosity, logging.DEBUG)
        logger = logging.getLogger("django_dbqueue")
        if not logger.handlers and not logging.getLogger().handlers:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
            logger.addHandler(handler)
        logger.setLevel(level)
