"""Settings, read from ``DBQUEUE_<NAME>`` once and again after any change (override_settings works).

Each value is read from Django's settings once and kept until a setting changes (Django's
``setting_changed`` signal: ``override_settings``, ``TestCase.settings()``, pytest-django's
``settings`` fixture), so an access after a change still sees the new value. Why kept: a
``DBQUEUE_`` name a project leaves out is an ``AttributeError`` raised and caught inside Django's
``LazySettings`` on every read, and the worker reads some of them for every job.

Each setting is declared once, below, with its default, its kind and its range. The same
declarations are what ``settings.<NAME>`` reads and what the system checks
(``settings_checks.py``) and the commands' argument validators check values against.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from django.conf import settings as django_settings
from django.core.signals import setting_changed

from django_dbqueue.compat import StrEnum

if TYPE_CHECKING:
    from .retry import RetryPolicy

PREFIX = "DBQUEUE_"
DAY = 86_400


class Kind(StrEnum):
    """What a setting's value must be (the text is used in check messages)."""

    SECONDS = "a finite number of seconds"
    WHOLE = "a whole number (an int, not a bool)"
    FLAG = "True or False (a bool)"
    RETRY_POLICY = "None or a retry policy (e.g. ExponentialBackoff(), NoRetry())"
    PATH = "a non-empty file path (str or Path)"
    SCHEDULES = "a dict of schedule declarations by name (docs/schedules.md)"
    TARGETS = "a list of schedule targets ('task:<path>', 'message:<kind>', 'model:<app_label.Model>')"
    PARTITIONS = 'None, "daily" or "monthly"'


T = TypeVar("T")  # PEP 695's `class Setting[T]` needs Python 3.12


#: A value not read yet (None and False are values).
_UNREAD = object()
#: The values read so far, by ``DBQUEUE_`` name; emptied whenever a setting changes.
_read: dict[str, Any] = {}


def _forget_read(**kwargs: Any) -> None:
    """Any setting changed: read every value again on its next access (a change of another
    setting can matter too, e.g. a whole settings module swapped by ``override_settings``)."""
    _read.clear()


setting_changed.connect(_forget_read, dispatch_uid="django_dbqueue.conf.forget_read")


class Setting(Generic[T]):
    """One ``DBQUEUE_<NAME>`` setting: read on the instance, its declaration on the class.

    ``low``/``high`` bound numbers (inclusive); the kind says what else a value must be."""

    def __init__(self, default: T, kind: Kind, low: float | None = None, high: float | None = None):
        self.default, self.kind, self.low, self.high = default, kind, low, high
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @property
    def setting_name(self) -> str:
        return PREFIX + self.name

    @overload
    def __get__(self, instance: None, owner: type) -> Setting[T]: ...
    @overload
    def __get__(self, instance: object, owner: type) -> T: ...
    def __get__(self, instance: object | None, owner: type) -> Setting[T] | T:
        if instance is None:
            return self
        value = _read.get(self.name, _UNREAD)
        if value is _UNREAD:
            value = _read[self.name] = getattr(django_settings, self.setting_name, self.default)
        return value


SECONDS, WHOLE, FLAG = Kind.SECONDS, Kind.WHOLE, Kind.FLAG
RETRY_POLICY, PATH, SCHEDULES = Kind.RETRY_POLICY, Kind.PATH, Kind.SCHEDULES
TARGETS = Kind.TARGETS
PARTITIONS = Kind.PARTITIONS


class Settings:
    """The declaration table: default, kind, and range of every setting."""

    #: Seconds a claim stays valid unless renewed; a model's ``queue_lease`` wins.
    LEASE = Setting(300.0, SECONDS, 1, 7 * DAY)
    #: Atomic mode: seconds a handler's transaction may sit idle (no statement) before the
    #: database ends the session, rolling it back and freeing its row locks, so the rows of a
    #: worker the network cut off come back. None: twice the longest lease (or the longest
    #: ``queue_timeout``) of the atomic models the worker runs, at least 30 s; 0: the server's own
    #: setting.
    ATOMIC_IDLE_TIMEOUT: Setting[float | None] = Setting(None, SECONDS, 0, 14 * DAY)
    #: Most rows claimed per claim statement by ``runqueue`` (``--batch-size`` fixes a size);
    #: how many fit is judged by ``BATCH_SECONDS``.
    BATCH_SIZE = Setting(500, WHOLE, 1, 100_000)
    #: Seconds of work a worker claims at once, judged by how long its recent jobs of the
    #: model took (batching.py): big batches of fast jobs, small batches of slow ones.
    BATCH_SECONDS = Setting(0.1, SECONDS, 0.001, 3600)
    #: Longest sleep of an idle worker between polls, in seconds (``--poll-interval``).
    POLL_INTERVAL = Setting(0.045, SECONDS, 0.01, 3600)
    #: Seconds between two runs of the expired-lease rescue by each worker.
    RESCUE_INTERVAL = Setting(15.0, SECONDS, 0.01, DAY)
    #: Rows the rescue statement handles at most per run (it is bounded, never a long scan).
    RESCUE_LIMIT = Setting(500, WHOLE, 1, 100_000)
    #: Seconds between two flushes of batched successes in lease mode.
    FLUSH_INTERVAL = Setting(1.0, SECONDS, 0.01, 3600)
    #: Fair share (``queue_fair_key``): rows the fair ranking offers a claim per row it wants,
    #: so concurrent claimers that ranked alike still fill their batches (docs/fair-share.md).
    FAIR_CANDIDATES = Setting(4, WHOLE, 1, 100)
    #: Characters of a failure's traceback kept in ``queue_last_error``.
    MAX_ERROR_LENGTH = Setting(20_000, WHOLE, 1, 1_000_000)
    #: How often a claim is retried after a deadlock or lock-wait timeout (0: never).
    DEADLOCK_RETRIES = Setting(5, WHOLE, 0, 100)
    #: PostgreSQL: run the claim's statements whose text repeats (the fair walk, the aging and
    #: flow-control reads) as prepared statements, planned once per connection
    #: (backends/prepared.py). False behind a pooler that gives each transaction another
    #: server session (PgBouncer in transaction mode).
    PREPARED_STATEMENTS = Setting(True, FLAG)
    #: Seconds between two heartbeats of a worker in the WorkerProcess table.
    HEARTBEAT_INTERVAL = Setting(10.0, SECONDS, 0.01, DAY)
    #: Write a QueueAttempt row for every attempt (a model's ``queue_history`` wins).
    HISTORY = Setting(True, FLAG)
    #: How long each partition of a partitioned history table spans, "daily" or "monthly"; None
    #: (the default): workers make no partitions ahead (``partitionhistory --convert`` first).
    HISTORY_PARTITIONS: Setting[str | None] = Setting(None, PARTITIONS)
    #: Partitions kept made ahead of the current one (by workers hourly, and by purgequeue).
    HISTORY_PARTITIONS_AHEAD = Setting(7, WHOLE, 1, 400)
    #: Largest JSON payload (bytes) ``Message.objects.publish`` accepts (at most 1 GiB,
    #: MySQL's largest ``max_allowed_packet``).
    MAX_PAYLOAD_BYTES = Setting(1_000_000, WHOLE, 1, 2**30)
    #: Retry policy of ``django.tasks`` tasks run through django_dbqueue (None: no retries, as
    #: Django's own backends; one task opts in with ``django_dbqueue.tasks.retry``).
    TASK_RETRY: Setting[RetryPolicy | None] = Setting(None, RETRY_POLICY)
    #: The MariaDB Connector/J jar the Spark pipeline (``django_dbqueue.spark``) hands to Spark.
    SPARK_JDBC_JAR = Setting("/usr/share/java/mariadb-java-client.jar", PATH)
    #: Recurring jobs declared in settings, by name (docs/schedules.md; each is checked).
    SCHEDULES: Setting[dict[str, Any]] = Setting({}, SCHEDULES)
    #: Targets the admin may schedule besides those the declared schedules have (the
    #: allowlist: a schedule row runs nothing else; docs/schedules.md).
    SCHEDULE_TARGETS: Setting[list[str]] = Setting([], TARGETS)
    #: Seconds between two firing ticks of a worker (one indexed query when nothing is due).
    SCHEDULE_INTERVAL = Setting(1.0, SECONDS, 0.05, 3600)
    #: Seconds late a slot may be found and still fire under ``catch_up="skip"``.
    SCHEDULE_GRACE = Setting(60.0, SECONDS, 1, DAY)

    @classmethod
    def declared(cls) -> dict[str, Setting[Any]]:
        """Every setting's declaration, by ``DBQUEUE_`` name."""
        return {s.setting_name: s for s in vars(cls).values() if isinstance(s, Setting)}


settings = Settings()
