"""Settings, read lazily from ``DBQUEUE_<NAME>`` on every access (so override_settings works)."""

from __future__ import annotations

from typing import Any

from django.conf import settings as django_settings


class Settings:
    #: Seconds a claim stays valid unless renewed; a model's ``queue_lease`` wins.
    LEASE: float = 300.0
    #: Most rows claimed per claim statement by ``runqueue`` (``--batch-size`` fixes a size);
    #: how many fit is judged by ``BATCH_SECONDS``.
    BATCH_SIZE: int = 500
    #: Seconds of work a worker claims at once, judged by how long its recent jobs of the
    #: model took (batching.py): big batches of fast jobs, small batches of slow ones.
    BATCH_SECONDS: float = 0.1
    #: Longest sleep of an idle worker between polls, in seconds (``--poll-interval``).
    POLL_INTERVAL: float = 0.045
    #: Seconds between two runs of the expired-lease rescue by each worker.
    RESCUE_INTERVAL: float = 15.0
    #: Rows the rescue statement handles at most per run (it is bounded, never a long scan).
    RESCUE_LIMIT: int = 500
    #: Seconds between two flushes of batched successes in lease mode.
    FLUSH_INTERVAL: float = 1.0
    #: Characters of a failure's traceback kept in ``queue_last_error``.
    MAX_ERROR_LENGTH: int = 20_000
    #: How often a claim is retried after a deadlock or lock-wait timeout.
    DEADLOCK_RETRIES: int = 5
    #: Seconds between two heartbeats of a worker in the WorkerProcess table.
    HEARTBEAT_INTERVAL: float = 10.0
    #: Write a QueueAttempt row for every attempt (a model's ``queue_history`` wins).
    HISTORY: bool = True
    #: Largest JSON payload (bytes) ``Message.objects.publish`` accepts.
    MAX_PAYLOAD_BYTES: int = 1_000_000
    #: Retry policy of ``django.tasks`` tasks run through django_dbqueue (None: no retries, as
    #: Django's own backends; one task opts in with ``django_dbqueue.tasks.retry``).
    TASK_RETRY: object = None
    #: The MariaDB Connector/J jar the Spark pipeline (``django_dbqueue.spark``) hands to Spark.
    SPARK_JDBC_JAR: str = "/usr/share/java/mariadb-java-client.jar"

    def __getattribute__(self, name: str) -> Any:
        if name.isupper():
            default = object.__getattribute__(self, name)
            return getattr(django_settings, "DBQUEUE_" + name, default)
        return object.__getattribute__(self, name)


settings = Settings()
