"""Unique jobs: at most one active (READY or RUNNING) row per key, enforced by the database.

A model opts in by declaring the key column, computed by the database from the model's own
fields::

    class CustomerSync(QueueMixin):
        customer = models.ForeignKey(Customer, on_delete=models.CASCADE)
        queue_unique_key = QueueUniqueKey("customer")
        queue_unique = "replace"          # what a duplicate enqueue does (default "ignore")

The column is a stored generated column with a unique index: ``CASE WHEN queue_state IN
('ready', 'running') THEN <key> END``. The database writes it at every change of state, so
no code path (an outcome, the rescue, an admin bulk operation, a Spark INSERT, a user's own
UPDATE) can forget to clear it, and a row that finishes frees its key in the same statement.
NULLs never collide, so finished rows do not block (MySQL/MariaDB have no partial indexes;
this needs none). Two enqueuers racing with one key: the database lets one in, the other
gets the duplicate policy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from django.db import IntegrityError, models, router, transaction
from django.db.models import Case, F, Value, When
from django.db.models.functions import Cast, Concat

from ..exceptions import DuplicateJob
from ..states import QueueState

if TYPE_CHECKING:
    from ..queue.row import QueueRow

#: What enqueueing a row whose key is active already does.
POLICIES = ("ignore", "replace", "raise")
#: The name of the key column (it starts with ``queue_`` like every queue column).
KEY_FIELD = "queue_unique_key"
#: Between the parts of a key made of several fields.
SEPARATOR = "\x1f"
_ACTIVE = [QueueState.READY.value, QueueState.RUNNING.value]
#: A duplicate found, then gone before it could be looked at (it finished): try again.
_ATTEMPTS = 3


def key_expression(fields: Sequence[str], max_length: int) -> Case:
    text = models.CharField(max_length=max_length)
    parts: list[Any] = [Cast(F(name), text) for name in fields]
    if len(parts) > 1:
        joined: list[Any] = [parts[0]]
        for part in parts[1:]:
            joined += [Value(SEPARATOR), part]
        key: Any = Concat(*joined, output_field=text)
    else:
        key = parts[0]
    return Case(When(queue_state__in=_ACTIVE, then=key), default=Value(None), output_field=text)


class QueueUniqueKey(models.GeneratedField):
    """The unique key of the active rows of a queue model: the named fields' values while the
    row is READY or RUNNING, NULL otherwise. ``max_length`` bounds the key's text."""

    def __init__(self, *fields: str, max_length: int = 255, **kwargs: Any) -> None:
        if not fields or not all(isinstance(name, str) and name for name in fields):
            raise TypeError("QueueUniqueKey() needs the names of the fields that make the key")
        self.key_fields = tuple(fields)
        for name in ("expression", "output_field", "db_persist"):
            kwargs.pop(name, None)  # ours to decide
        kwargs.setdefault("unique", True)
        kwargs.setdefault("null", True)
        super().__init__(
            expression=key_expression(fields, max_length),
            output_field=models.CharField(max_length=max_length, null=True),
            db_persist=True,  # stored: MariaDB and SQLite index only stored generated columns well
            max_length=max_length,  # what Django's MySQL check (W003) reads of a unique column
            **kwargs,
        )

    def deconstruct(self) -> Any:
        name, _path, _args, kwargs = super().deconstruct()
        for key in ("expression", "output_field", "db_persist", "editable", "blank"):
            kwargs.pop(key, None)
        if kwargs.get("unique") is True:
            del kwargs["unique"]
        if kwargs.get("null") is True:
            del kwargs["null"]
        if kwargs.get("max_length") == 255:
            del kwargs["max_length"]
        return name, "django_dbqueue.flow.unique.QueueUniqueKey", list(self.key_fields), kwargs


def key_field(model: type[QueueRow]) -> QueueUniqueKey | None:
    """The model's key column, if it declares one."""
    field = next((f for f in model._meta.concrete_fields if f.name == KEY_FIELD), None)
    return field if isinstance(field, QueueUniqueKey) else None


def keyed(model: type[QueueRow], on_duplicate: str | None) -> bool:
    """Whether the model has a key column; raises ValueError for a policy that does not exist."""
    policy_of(model, on_duplicate)
    return key_field(model) is not None


def policy_of(model: type[QueueRow], on_duplicate: str | None) -> str:
    policy = on_duplicate if on_duplicate is not None else getattr(model, "queue_unique", None) or "ignore"
    if policy not in POLICIES:
        raise ValueError(f"on_duplicate must be one of {', '.join(POLICIES)}; got {policy!r}")
    return policy


class Enqueued(NamedTuple):
    """What enqueueing one row did: the row now active for its key, and whether it is the
    one given (False: a duplicate, ignored or replaced)."""

    row: QueueRow
    created: bool


def active_duplicate(row: QueueRow, using: str) -> QueueRow | None:
    """The other active row holding ``row``'s key, found by the fields the key is made of."""
    field = key_field(type(row))
    assert field is not None
    model = type(row)
    names = [model._meta.get_field(name).attname for name in field.key_fields]  # type: ignore[union-attr]
    match = {name: getattr(row, name) for name in names}
    rows = model._base_manager.using(using).filter(queue_state__in=_ACTIVE, **match)
    if row.pk is not None:
        rows = rows.exclude(pk=row.pk)
    return rows.first()


def enqueue(row: QueueRow, using: str, on_duplicate: str | None, write: Any) -> Enqueued:
    """Run ``write`` (the INSERT or the UPDATE that makes ``row`` active) behind a savepoint,
    so a duplicate key leaves the caller's transaction usable; on a duplicate, apply the
    policy. A model without a key column just writes."""
    policy = policy_of(type(row), on_duplicate)
    if key_field(type(row)) is None:
        return Enqueued(row, bool(write()))
    for _ in range(_ATTEMPTS):
        try:
            with transaction.atomic(using=using):
                return Enqueued(row, bool(write()))
        except IntegrityError:
            existing = active_duplicate(row, using)
            if existing is None:
                continue  # not our key (raised below), or the duplicate just finished
        return _duplicate(row, existing, using, policy)
    with transaction.atomic(using=using):  # once more, to raise what the database says
        return Enqueued(row, bool(write()))


def _duplicate(row: QueueRow, existing: QueueRow, using: str, policy: str) -> Enqueued:
    label = f"{type(row)._meta.label} pk={existing.pk}"
    if policy == "raise":
        raise DuplicateJob(f"{label} is {existing.queue_state} with the same unique key", existing)
    if policy == "replace":
        # Only a READY row is changed: a RUNNING one belongs to its worker (DESIGN.md).
        values: dict[str, Any] = {"queue_run_at": row.queue_run_at, "queue_priority": row.queue_priority}
        for name in getattr(type(row), "queue_unique_replace", ()):
            values[name] = getattr(row, name)
        rows = type(row)._base_manager.using(using).filter(pk=existing.pk, queue_state=QueueState.READY)
        if rows.update(**values):
            existing.refresh_from_db(using=using)
    return Enqueued(existing, False)


def enqueue_new(qs: models.QuerySet, obj: QueueRow, on_duplicate: str | None = None) -> Enqueued:
    """Insert ``obj`` as a READY row, unless its key is active: then the policy decides."""
    obj.queue_state = QueueState.READY

    def insert() -> bool:
        obj.save(using=qs.db, force_insert=True)
        return True

    return enqueue(obj, qs.db, on_duplicate, insert)


def enqueue_unique(obj: QueueRow, on_duplicate: str | None = None, using: str | None = None) -> Enqueued:
    """Insert ``obj`` as a READY row; if its key is active, the policy decides and the active
    row is returned (``created`` False). Like ``obj.enqueue()``, with the row it ended on."""
    # enqueue_new() reads only the QuerySet's database: the base manager's does as well as the
    # queue QuerySet (``queue_queryset()``, of the mixin above the engine) did.
    rows = type(obj)._base_manager.using(using or router.db_for_write(type(obj)))
    return enqueue_new(rows, obj, on_duplicate)


def bulk_enqueue_each(qs: models.QuerySet, rows: Sequence[QueueRow], on_duplicate: str | None) -> int:
    """``bulk_enqueue`` of a model with a key: one INSERT per row behind its own savepoint, so
    each duplicate gets the policy; returns how many rows were inserted."""
    policy_of(qs.model, on_duplicate)  # a bad policy raises before anything is written
    with transaction.atomic(using=qs.db, savepoint=False):
        return sum(enqueue_new(qs, row, on_duplicate).created for row in rows)
