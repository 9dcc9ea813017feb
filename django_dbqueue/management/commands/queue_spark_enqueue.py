"""``manage.py queue_spark_enqueue``: load Parquet, CSV or a table into a queue model through Spark."""

from __future__ import annotations

import argparse
import os
from datetime import datetime
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections, router

from django_dbqueue.compat import UTC
from django_dbqueue.management.arguments import duration, whole_number

from .runqueue import resolve_models


def aware_datetime(value: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an ISO 8601 date-time") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


class Command(BaseCommand):
    help = (
        "Enqueue rows from Parquet, CSV or a database table into a QueueMixin model, idempotently "
        "(rows whose key already exists are skipped), through Spark and JDBC."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("model", metavar="app_label.Model", help="The queue model to fill.")
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--parquet", metavar="PATH", help="A Parquet file or directory.")
        source.add_argument("--csv", metavar="PATH", help="A CSV file or directory with a header row.")
        source.add_argument("--table", metavar="NAME", help="A table of --source-database, read over JDBC.")
        parser.add_argument(
            "--columns",
            metavar="SRC[:FIELD],...",
            help="Source columns to take, optionally renamed to model fields (default: all, as named).",
        )
        parser.add_argument(
            "--key",
            action="append",
            metavar="FIELD",
            help="Key field (repeat for a composite key; default: the model's unique field).",
        )
        parser.add_argument(
            "--priority",
            type=whole_number(-(2**31), 2**31 - 1),
            default=None,
            help="Priority of every new row.",
        )
        when = parser.add_mutually_exclusive_group()
        when.add_argument(
            "--run-at", type=aware_datetime, help="ISO date-time the rows are due (UTC if naive)."
        )
        when.add_argument("--delay", type=duration, help="Due after this delay: 90, 45s, 30m, 12h, 7d.")
        parser.add_argument(
            "--batch-size", type=whole_number(), default=10_000, help="Rows per insert transaction."
        )
        parser.add_argument("--master", default="local[*]", help="Spark master URL (default local[*]).")
        parser.add_argument("--database", default=None, help="Database alias of the model (default: router).")
        parser.add_argument(
            "--source-database", default=None, help="Alias --table is read from (default: --database)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from django_dbqueue import spark as pipeline

        (model,) = resolve_models([options["model"]])
        database = options["database"] or router.db_for_write(model) or "default"
        source_db = options["source_database"] or database
        for alias in {database, source_db}:
            if alias not in connections:
                raise CommandError(f"Unknown database alias {alias!r}.")
        path = options["parquet"] or options["csv"]
        if path and not os.path.exists(path):
            raise CommandError(f"{path} does not exist.")
        verbose = options["verbosity"] >= 1

        def say(message: str) -> None:
            if verbose:
                self.stdout.write(message)
                self.stdout.flush()

        try:
            say(f"starting Spark ({options['master']})")
            spark = pipeline.spark_session(
                options["master"], app_name="queue_spark_enqueue", log_level="ERROR"
            )
            if options["parquet"]:
                df = spark.read.parquet(options["parquet"])
            elif options["csv"]:
                # Columns stay strings and are cast to the model's field types when staged.
                df = spark.read.option("header", True).csv(options["csv"])
            else:
                df = pipeline.read_table(spark, options["table"], using=source_db)
            df = self._columns(df, options["columns"])
            result = pipeline.enqueue_dataframe(
                df,
                model,
                key_columns=options["key"],
                priority=options["priority"],
                run_at=options["run_at"] or options["delay"],
                batch_size=options["batch_size"],
                using=database,
                progress=say,
            )
        except (ImproperlyConfigured, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        except Exception as exc:
            if type(exc).__module__.startswith(("pyspark", "py4j")):
                raise CommandError(f"Spark failed: {str(exc).strip().splitlines()[0]}") from exc
            raise
        for warning in result.warnings[:10]:
            self.stderr.write(f"warning: {warning}")
        self.stdout.write(
            f"{model._meta.label}: {result.inserted} inserted, {result.skipped} already queued "
            f"(of {result.rows} rows) in {result.seconds:.1f}s"
        )

    @staticmethod
    def _columns(df: Any, spec: str | None) -> Any:
        if not spec:
            return df
        from pyspark.sql import functions as sf

        picked = []
        for item in spec.split(","):
            source, _, name = item.strip().partition(":")
            if source not in df.columns:
                raise CommandError(f"--columns: the source has no column {source!r} (it has {df.columns})")
            picked.append(sf.col(f"`{source}`").alias(name or source))
        return df.select(*picked)
