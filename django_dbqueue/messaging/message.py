"""``Message``: a generic queue item for work that has no domain row of its own.

``Message.objects.publish("email.send", {"to": ...}, key="welcome:42")`` inserts a READY row
in the caller's transaction; a duplicate ``key`` (unique per kind) is ignored atomically by
the database (INSERT IGNORE / ON CONFLICT DO NOTHING), so two publishers racing with the
same key insert one row. ``runqueue`` hands each message to the handler of its kind.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.db import IntegrityError, models, transaction
from django.db.models.fields.json import KeyTransform

from ..backends import DbNow, backend_for, insert_new
from ..composition import chains
from ..composition import hooks as composition
from ..conf import settings
from ..exceptions import Discard
from ..observability.trace_mixin import QueueTraceMixin
from ..priorities import check_priority
from ..queue.mixin import QueueMixin
from ..queue.queryset import QueueQuerySet, run_at_expression
from ..states import QueueState
from . import reply as replies
from .handlers import NAME, InvalidPayload, get_handler
from .mixin import MessagingMixin
from .payloads import check_payload, check_text

#: Rows per INSERT statement of publish_many.
INSERT_CHUNK = 500


class UndecodablePayload:
    """What a payload column that does not hold valid JSON reads as (instead of crashing
    every claim that selects the row)."""

    def __init__(self, raw: Any, error: Exception) -> None:
        self.raw = raw
        self.error = error

    def __repr__(self) -> str:
        return f"<UndecodablePayload {str(self.raw)[:60]!r}: {self.error}>"


class PayloadField(models.JSONField):
    """A JSONField that reads text that is not JSON as an :class:`UndecodablePayload`.

    Django's own JSONField hands such text back as a plain string, which a handler would
    take for a valid payload; the message must end FAILED with the reason instead."""

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        if not isinstance(value, str) or isinstance(expression, KeyTransform):
            return super().from_db_value(value, expression, connection)
        try:
            return json.loads(value, cls=self.decoder)
        except ValueError as exc:
            return UndecodablePayload(value, exc)


class Published(NamedTuple):
    message: Message
    created: bool


class MessageQuerySet(MessagingMixin, QueueQuerySet["Message"]):
    def publish(
        self,
        kind: str,
        payload: Any = None,
        *,
        key: str | None = None,
        run_at: datetime | timedelta | None = None,
        priority: int = 0,
        queue: str = "default",
        on_commit: bool = False,
        after: Iterable[Any] | None = None,
        on_parent_failure: str = "cancel",
    ) -> Published | None:
        """Queue a message. With a ``key``, a message of the same kind and key that exists
        already (in any state) wins: nothing is inserted and ``created`` is False.

        With ``on_commit=True`` the message is published after the caller's transaction
        commits (and never if it rolls back); the call then returns None. With ``after`` (queue
        rows), the message waits until they succeeded (``on_parent_failure``: "cancel"/"run").
        """
        message = self._build(kind, payload, key, run_at, priority, queue)
        if after is not None:  # waits IDLE for its parents (docs/composition.md)
            message._state.db = self.db
            chains.enqueue_after(message, after, on_parent_failure)
            return Published(message, True)
        if on_commit:
            transaction.on_commit(lambda: self._insert_one(message), using=self.db)
            return None
        return self._insert_one(message)

    def publish_many(self, messages: Iterable[Mapping[str, Any]]) -> int:
        """Queue many messages (dicts of ``publish``'s arguments) in chunked INSERTs; a
        duplicate key is skipped. Returns how many were inserted."""
        built = [
            self._build(
                m["kind"],
                m.get("payload"),
                m.get("key"),
                m.get("run_at"),
                m.get("priority", 0),
                m.get("queue", "default"),
            )
            for m in messages
        ]
        composition.stamp(self.model, rows=built)
        inserted = 0
        with transaction.atomic(using=self.db, savepoint=False):
            for start in range(0, len(built), INSERT_CHUNK):
                inserted += self._insert_new(built[start : start + INSERT_CHUNK])
        if inserted:
            backend_for(self.db).notify([self.model._meta.db_table])
        return inserted

    def _insert_one(self, message: Message) -> Published:
        if message.key is None:
            message.save(using=self.db, force_insert=True)  # post_save sends the wake-up
            return Published(message, True)
        try:
            # A savepoint, so that a duplicate key leaves the caller's transaction usable.
            with transaction.atomic(using=self.db):
                message.save(using=self.db, force_insert=True)
        except IntegrityError:
            existing = (
                self.model._base_manager.using(self.db)
                .filter(kind=message.kind, key=message.key, group=message.group)
                .first()
            )
            if existing is None:
                raise  # not the (kind, key) constraint: a real error
            return Published(existing, False)
        return Published(message, True)

    def _insert_new(self, messages: list[Message]) -> int:
        """Insert the messages whose (kind, key) does not exist yet; return how many.

        The database skips a duplicate key atomically (``ignore_conflicts``), so racing
        publishers insert one row, and the count is the database's own (the rows this call
        inserted): a key a concurrent publisher inserted first is counted by that one only."""
        keys = {(m.kind, m.key) for m in messages if m.key is not None}
        existing: set[tuple[str, str | None]] = set()
        if keys:
            kinds = {kind for kind, _ in keys}
            existing = {
                pair
                for pair in self.model._base_manager.using(self.db)
                .filter(kind__in=kinds, key__in=[key for _, key in keys])
                .values_list("kind", "key")
                if pair in keys
            }
        fresh, seen = [], set(existing)
        for message in messages:
            pair = (message.kind, message.key)
            if message.key is not None:
                if pair in seen:
                    continue
                seen.add(pair)
            fresh.append(message)
        if not keys:
            self.model._base_manager.using(self.db).bulk_create(fresh)
            return len(fresh)
        return insert_new(self.model, self.db, fresh)

    def check_publish(
        self, kind: str, payload: Any, *, key: str | None = None, priority: int = 0, queue: str = "default"
    ) -> None:
        """Raise ``ValueError``/``TypeError`` where ``publish()`` would, write nothing (the
        admin's dead-letter console checks an edited payload with it before a replay)."""
        self._build(kind, payload, key, None, priority, queue)

    def _build(
        self,
        kind: str,
        payload: Any,
        key: str | None,
        run_at: datetime | timedelta | None,
        priority: int,
        queue: str,
    ) -> Message:
        if not isinstance(kind, str) or not NAME.match(kind):
            raise ValueError(f"message kind {kind!r}: use 1-100 letters, digits and _ . : -")
        if not isinstance(queue, str) or not NAME.match(queue) or len(queue) > 64:
            raise ValueError(f"queue name {queue!r}: use 1-64 letters, digits and _ . : -")
        if key is not None and (not isinstance(key, str) or not 0 < len(key) <= 191):
            raise ValueError(f"message key must be a string of 1-191 characters, not {key!r}")
        if key is not None:
            check_text(key, f"the key of a {kind!r} message")
        check_priority(priority, self.model)
        check_payload(payload, kind)
        # Both times from the database's clock in the INSERT, a delay counted from it too:
        # never this host's clock (DESIGN.md, "One clock").
        return self.model(
            kind=kind,
            key=key,
            payload=payload,
            queue=queue,
            queue_priority=priority,
            queue_run_at=run_at_expression(run_at),
            queue_enqueued_at=DbNow(),
            queue_state=QueueState.READY,
        )


MessageManager = models.Manager.from_queryset(MessageQuerySet)


class Message(QueueTraceMixin, QueueMixin):
    """A unit of work with a kind, a JSON payload and an optional de-duplication key."""

    queue = models.CharField(max_length=64, default="default")
    kind = models.CharField(max_length=100)
    key = models.CharField(max_length=191, null=True, blank=True)
    payload = PayloadField(null=True, blank=True)
    #: A topic's subscriber group ("" for a plain message); a request waits for a Reply.
    group = models.CharField(max_length=64, default="", blank=True)
    expects_reply = models.BooleanField(default=False)

    # Replaces QueueMixin's QueueManager: django-stubs cannot relate two from_queryset() classes.
    objects = MessageManager()  # type: ignore[assignment, misc]

    class Meta(QueueMixin.Meta):
        app_label = "django_dbqueue"
        constraints = [
            models.UniqueConstraint(fields=["kind", "key", "group"], name="dbqueue_message_unique_key")
        ]
        indexes = [
            models.Index(
                fields=["queue_state", "-queue_priority", "queue_run_at", "queue_enqueued_at"],
                name="dbqueue_msg_claim",
            ),
            models.Index(
                fields=["queue_state", "queue", "-queue_priority", "queue_run_at", "queue_enqueued_at"],
                name="dbqueue_msg_queue_claim",
            ),
            # "Is a message due?" without reading the parked ones (QueueMixin's DUE_INDEX_FIELDS).
            models.Index(fields=["queue_state", "queue_run_at"], name="dbqueue_msg_due"),
            models.Index(fields=["queue_state", "queue_finished_at"], name="dbqueue_msg_finished"),
            models.Index(fields=["queue_has_error"], name="dbqueue_msg_has_error"),  # the admin's filter
        ]

    def __str__(self) -> str:
        suffix = f" [{self.key}]" if self.key else ""
        return f"{self.kind}{suffix} #{self.pk}"

    def process(self) -> None:
        handler = get_handler(self.kind, self.group)
        if handler is None:
            group = f" (subscriber group {self.group!r})" if self.group else ""
            raise Discard(f"no handler is registered for message kind {self.kind!r}{group}")
        if isinstance(self.payload, UndecodablePayload):
            raise Discard(
                f"the payload is not valid JSON ({self.payload.error}): {str(self.payload.raw)[:200]!r}"
            )
        size = len(json.dumps(self.payload).encode())
        if size > settings.MAX_PAYLOAD_BYTES:
            raise Discard(f"the payload is {size} bytes, over DBQUEUE_MAX_PAYLOAD_BYTES")
        try:
            handler.validate(self.payload)
        except InvalidPayload as exc:
            raise Discard(f"invalid payload for {self.kind!r}: {exc}") from exc
        result = handler.func(self)
        if self.expects_reply:
            replies.deliver(self, result)


composition.MESSAGE_MODEL = Message  # a batch's message() callbacks are published here


class ArchivedMessage(models.Model):
    """A finished message moved out of the hot table by ``purgequeue --archive`` (seed 000:
    accept = archive + delete), so the queue table stays small while history stays queryable."""

    original_id = models.BigIntegerField()
    queue = models.CharField(max_length=64)
    kind = models.CharField(max_length=100)
    key = models.CharField(max_length=191, null=True, blank=True)
    payload = PayloadField(null=True, blank=True)
    state = models.CharField(max_length=16)
    attempts = models.PositiveIntegerField()
    last_error = models.TextField(blank=True, default="")
    enqueued_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True)
    archived_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = "django_dbqueue"
        indexes = [
            models.Index(fields=["kind", "key"], name="dbqueue_archive_key"),
            models.Index(fields=["finished_at"], name="dbqueue_archive_finished"),
        ]

    def __str__(self) -> str:
        return f"archived {self.kind} #{self.original_id}"

    @classmethod
    def from_message(cls, message: Message) -> ArchivedMessage:
        payload = message.payload
        if isinstance(payload, UndecodablePayload):
            payload = {"undecodable": str(payload.raw)}
        return cls(
            original_id=message.pk,
            queue=message.queue,
            kind=message.kind,
            key=message.key,
            payload=payload,
            state=message.queue_state,
            attempts=message.queue_attempts,
            last_error=message.queue_last_error,
            enqueued_at=message.queue_enqueued_at,
            finished_at=message.queue_finished_at,
        )
