"""Per-key concurrency and rate limits, enforced inside the claim (issue #22).

A model declares them with class attributes (validated by system checks)::

    class Order(QueueMixin):
        customer = models.ForeignKey(Customer, ...)
        queue_limit_key = "customer"        # a concrete field: its value is the row's key
        queue_concurrency_limit = 2         # at most 2 RUNNING rows per customer, all hosts
        queue_rate_limit = (10, 1.0)        # at most 10 claims per customer per second

How a claim keeps them (see docs/flow-control.md): it skips keys already full (one read, or
subqueries of the locking SELECT on PostgreSQL), locks the candidate rows as usual, then
locks one ``QueueKeySlot`` row per key it wants with ``FOR UPDATE SKIP LOCKED`` and recounts
that key's RUNNING rows under the lock. Two claimers never decide on one key at once,
neither waits for the other, and a key whose slot is busy is simply left for the next claim.
Rows a limit holds back stay READY, their attempts untouched. Rows with no key (NULL) are not
limited.
"""

from __future__ import annotations

import functools
import hashlib
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.core.exceptions import ImproperlyConfigured
from django.db import connections, models
from django.db.models import Count, F

from ..backends import aware, backend_for, column_converters, compiled, converted, db_now_plus
from ..fairness import heads, locked_candidates
from ..states import QueueState
from ..tables.flow import QueueKeySlot

ATTRIBUTES = ("queue_limit_key", "queue_concurrency_limit", "queue_rate_limit")


@dataclass(frozen=True)
class Limits:
    key: str  # the key field's column attribute (``customer_id`` for ``customer``)
    concurrency: int | None
    rate: int | None
    period: timedelta | None


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _period(value: Any) -> timedelta | None:
    if isinstance(value, timedelta):
        return value if value > timedelta(0) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return timedelta(seconds=value)
    return None


def problems(model: type[models.Model]) -> list[str]:
    """What is wrong with a model's limits, as sentences (empty when fine or undeclared)."""
    key = getattr(model, "queue_limit_key", None)
    concurrency = getattr(model, "queue_concurrency_limit", None)
    rate = getattr(model, "queue_rate_limit", None)
    label = model._meta.label
    found = []
    if concurrency is not None and not _positive_int(concurrency):
        found.append(
            f"{label}.queue_concurrency_limit must be a whole number >= 1 or None, not {concurrency!r}"
        )
    if rate is not None and not (
        isinstance(rate, tuple) and len(rate) == 2 and _positive_int(rate[0]) and _period(rate[1]) is not None
    ):
        found.append(
            f"{label}.queue_rate_limit must be (claims, period): a whole number >= 1 and a positive "
            f"number of seconds or timedelta, e.g. (10, 1.0); not {rate!r}"
        )
    if key is None:
        if concurrency is not None or rate is not None:
            found.append(f"{label} declares a limit but no queue_limit_key: name the field holding the key")
        return found
    if not isinstance(key, str):
        return [*found, f"{label}.queue_limit_key must be a field name (str), not {key!r}"]
    # A concrete column, by its name or attname ("customer" or "customer_id").
    key_field = next((f for f in model._meta.concrete_fields if key in (f.name, f.attname)), None)
    if key_field is None:
        found.append(
            f"{label}.queue_limit_key names {key!r}, which is not a concrete field of the model: the key "
            "must be stored on the row (declare a field and fill it in save() to key by a computed value)"
        )
    if concurrency is None and rate is None:
        found.append(
            f"{label}.queue_limit_key is set without a limit: set queue_concurrency_limit or queue_rate_limit"
        )
    return found


@functools.cache
def limits_of(model: type[models.Model]) -> Limits | None:
    """The model's limits, or None when it declares none (the plain claim)."""
    if all(getattr(model, name, None) is None for name in ATTRIBUTES):
        return None
    found = problems(model)
    if found:
        raise ImproperlyConfigured(found[0])
    name = model.queue_limit_key  # type: ignore[attr-defined]
    attname = next(f.attname for f in model._meta.concrete_fields if name in (f.name, f.attname))
    rate = model.queue_rate_limit  # type: ignore[attr-defined]
    return Limits(
        key=attname,
        concurrency=model.queue_concurrency_limit,  # type: ignore[attr-defined]
        rate=rate[0] if rate else None,
        period=_period(rate[1]) if rate else None,
    )


def gate(model: type[models.Model], using: str) -> Gate | None:
    """A claim's gate through the model's limits; None (the plain claim) without limits."""
    declared = limits_of(model)
    if declared is None:
        return None
    # Built before the claim's transaction opens: whether the claim owns its transaction.
    return Gate(model, declared, using, own_transaction=not connections[using].in_atomic_block)


class Slot(NamedTuple):
    """A locked slot row, as read (tuples: a claim reads up to a batch of them)."""

    key: str
    pk: Any
    window_start: datetime | None
    window_count: int


def _locked(slots: models.QuerySet) -> dict[str, Slot]:
    """Lock ``slots`` without waiting (``SKIP LOCKED``); the ones locked, by digest."""
    rows = slots.select_for_update(skip_locked=True).values_list("key", "pk", "window_start", "window_count")
    return {row[0]: Slot(*row) for row in rows}


def digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def _slots(using: str, model: type[models.Model]) -> models.QuerySet:
    slot = QueueKeySlot
    return slot._default_manager.using(using).filter(model=model._meta.label)


def _counts(running: models.QuerySet, key: str) -> models.QuerySet:
    """``(key, RUNNING rows)`` of each key of ``running``."""
    return running.order_by().values(key).annotate(n=Count("pk")).values_list(key, "n")


@dataclass
class Gate:
    """One claim's pass through the limits of one model, inside the claim's transaction."""

    model: type[models.Model]
    limits: Limits
    using: str
    #: The claim's transaction is its own (a worker's claim), not a caller's: the gate may
    #: set what lasts until its end (``count_running_by_index``).
    own_transaction: bool = False
    _key_of: dict[Any, str] = field(default_factory=dict)
    _slots: dict[str, Any] = field(default_factory=dict)
    _now: datetime | None = None

    def take(self, qs: Any, limit: int) -> list[tuple[Any, Any, Any]]:
        """The claim's locking SELECT (``qs.claim_candidates``) less the full keys, admitted."""
        backend = backend_for(self.using)
        if self.limits.concurrency is not None and self.own_transaction:
            backend.count_running_by_index()
        if backend.full_keys_in_claim:
            qs = self._without_full(qs)
        else:
            full = self.full_keys()
            if full:
                qs = qs.exclude(**{f"{self.limits.key}__in": full})
        return self.admit(locked_candidates(qs, limit, (self.limits.key,)))

    def _without_full(self, qs: Any) -> Any:
        """``qs`` less the full keys, the concurrency limit's by a subquery of the locking
        SELECT itself: one round trip less, which on PostgreSQL cost a claim more than the
        read. Only a pre-filter (:meth:`admit` decides under the slots' locks), so reading it
        inside the SELECT changes nothing exact. The rate-spent keys are still read first: as
        a subquery (``NOT IN`` the spent slots' text) the planner guessed few READY rows left
        and sorted all of them instead of reading the claim index in order (EXPLAIN: 10,000
        rows read and sorted for a batch of 100; the rate-limit claim 0.51x the plain one)."""
        key = self.limits.key
        if self.limits.concurrency is not None:
            qs = qs.exclude(**{f"{key}__in": self._full_by_running()})
        if self.limits.rate is None or self.limits.period is None:
            return qs
        spent = self._spent_by_text()
        return qs.exclude(**{f"{key}__in": spent}) if spent else qs

    def rows(self) -> models.QuerySet:
        return self.model._base_manager.using(self.using)

    def full_keys(self) -> list[Any]:
        """Keys no claim can take now (a plain read): the candidate SELECT skips their rows,
        so a batch is not filled with rows that would only be put back."""
        full: list[Any] = []
        if self.limits.concurrency is not None:
            full.extend(self._key_values(self._run(("full",), self._full_by_running, {})))
        if self.limits.rate is not None and self.limits.period is not None:
            full.extend(self._spent_by_text())
        return full

    def _spent_by_text(self) -> list[Any]:
        """The keys whose rate window is spent, read back from their slots' text."""
        to_python = self.model._meta.get_field(self.limits.key).to_python  # type: ignore[union-attr]
        spent = []
        for (text,) in self._run(("spent",), self._spent_keys, {}):
            try:
                spent.append(to_python(text))
            except Exception:  # noqa: BLE001 - a key that does not read back is just not skipped
                continue
        return spent

    def _run(self, shape: tuple[str, ...], build: Any, values: dict[str, Any]) -> list[tuple[Any, ...]]:
        """The gate's statement ``shape``, built once per model, database and limits (its
        values only change in ``values``' markers): compiling the gate's QuerySets cost a
        claim about as much CPU as the plain claim's whole statement."""
        statement = heads.cached((self.model, self.using, self.limits), shape, lambda: compiled(build()))
        return statement.fetch(self.using, values)

    def _key_values(self, rows: list[tuple[Any, ...]]) -> list[Any]:
        """The first column of ``rows``, key values as a QuerySet would have read them."""
        field = self.model._meta.get_field(self.limits.key)
        connection = connections[self.using]
        found = column_converters(field, connection)  # type: ignore[arg-type]
        return [converted(row[0], found, connection) for row in rows]

    def _full_by_running(self) -> models.QuerySet:
        key = self.limits.key
        running = self.rows().filter(queue_state=QueueState.RUNNING, **{f"{key}__isnull": False})
        counted = running.order_by().values(key).annotate(n=Count("pk"))
        return counted.filter(n__gte=self.limits.concurrency).values_list(key)

    def _spent_keys(self) -> models.QuerySet:
        assert self.limits.period is not None
        spent = _slots(self.using, self.model).filter(
            window_count__gte=self.limits.rate, window_start__gt=db_now_plus(-self.limits.period)
        )
        return spent.values_list("value")

    def admit(self, candidates: list[tuple[Any, ...]]) -> list[tuple[Any, Any, Any]]:
        """Of the locked ``(pk, token, now, key)`` candidates, those the limits let through."""
        if not candidates:
            return []
        self._now = aware(candidates[0][2])
        texts = {str(row[3]) for row in candidates if row[3] is not None}
        self._slots = self._lock_slots(texts)
        running = self._running_under_lock([row[3] for row in candidates if str(row[3]) in self._slots])
        taken: Counter[str] = Counter()
        admitted = []
        for pk, token, now, key in candidates:
            if key is None:
                admitted.append((pk, token, now))
                continue
            text = str(key)
            slot = self._slots.get(text)
            if slot is None:
                continue  # another claimer holds this key's slot: its rows wait for the next claim
            if self.limits.concurrency is not None and running[text] + taken[text] >= self.limits.concurrency:
                continue
            if self.limits.rate is not None and self._spent(slot) + taken[text] >= self.limits.rate:
                continue
            taken[text] += 1
            self._key_of[pk] = text
            admitted.append((pk, token, now))
        return admitted

    def _lock_slots(self, texts: set[str]) -> dict[str, Any]:
        if not texts:
            return {}
        by_digest = {digest(text): text for text in texts}
        slots = _slots(self.using, self.model)
        locked = self._locked_slots(sorted(by_digest))
        missing = set(by_digest) - set(locked)
        if missing:
            # Skipped rows are locked by another claimer, or do not exist yet (a new key):
            # a plain read tells which; new slots are inserted and locked.
            new = missing - set(slots.filter(key__in=list(missing)).values_list("key", flat=True))
            if new:
                slot = QueueKeySlot
                label = self.model._meta.label
                slot._default_manager.using(self.using).bulk_create(
                    [slot(model=label, key=d, value=by_digest[d][:255]) for d in sorted(new)],
                    ignore_conflicts=True,
                )
                locked.update(self._locked_slots(sorted(new)))
        return {by_digest[d]: s for d, s in locked.items() if d in by_digest}

    def _locked_slots(self, digests: list[str]) -> dict[str, Slot]:
        """Lock the slots of ``digests`` without waiting; the ones locked, by digest."""
        backend = backend_for(self.using)
        slots = _slots(self.using, self.model)
        if not backend.binds_arrays:
            return _locked(slots.filter(key__in=digests))

        # One array parameter: with a parameter per key psycopg converted the statement anew
        # on every claim (it caches only those of at most 50), and the planner filtered every
        # slot of the model through the (model, window_start) index instead of looking the
        # keys up in the unique (model, key) one.
        def build() -> models.QuerySet:
            narrowed = backend.with_array(slots, "key", heads.Marker("keys"))
            return narrowed.select_for_update(skip_locked=True).values_list(*Slot._fields)

        rows = self._run(("slots",), build, {"keys": digests})
        connection = connections[self.using]
        window = column_converters(QueueKeySlot._meta.get_field("window_start"), connection)
        return {row[0]: Slot(row[0], row[1], converted(row[2], window, connection), row[3]) for row in rows}

    def _running_under_lock(self, keys: list[Any]) -> Counter[str]:
        if self.limits.concurrency is None or not keys:
            return Counter()
        key = self.limits.key
        running = self.rows().filter(queue_state=QueueState.RUNNING)
        backend = backend_for(self.using)
        if not backend.binds_arrays:
            return Counter({str(k): n for k, n in _counts(running.filter(**{f"{key}__in": set(keys)}), key)})
        # One array parameter, as the slots' lock (:meth:`_locked_slots`).
        connection = connections[self.using]
        prep = self.model._meta.get_field(key).get_db_prep_value  # type: ignore[union-attr]
        array = sorted({prep(k, connection) for k in keys})
        build = functools.partial(_counts, backend.with_array(running, key, heads.Marker("keys")), key)
        rows = self._run(("running",), build, {"keys": array})
        return Counter(dict(zip(map(str, self._key_values(rows)), (row[1] for row in rows), strict=True)))

    def _fresh(self, slot: Any) -> bool:
        assert self._now is not None and self.limits.period is not None
        return slot.window_start is None or aware(slot.window_start) + self.limits.period <= self._now

    def _spent(self, slot: Any) -> int:
        return 0 if self._fresh(slot) else int(slot.window_count)

    def charge(self, ids: list[Any]) -> None:
        """Count the claims of the rows finally taken against their keys' rate windows. A
        window starts at the first claim after the last one ended (database clock). Slots are
        updated in groups of the same change (usually one or two UPDATEs by primary key): a
        CASE per slot costs more to compile than to run."""
        if self.limits.rate is None:
            return
        groups: dict[tuple[bool, int], list[Any]] = {}
        for text, count in Counter(self._key_of[pk] for pk in ids if pk in self._key_of).items():
            slot = self._slots[text]
            groups.setdefault((self._fresh(slot), count), []).append(slot.pk)
        slots, backend = _slots(self.using, self.model), backend_for(self.using)
        for (fresh, count), pks in sorted(groups.items()):
            # By primary key: filtered by the model alone the planner walked every slot of it.
            chosen = (
                backend.with_array(slots, "pk", pks) if backend.binds_arrays else slots.filter(pk__in=pks)
            )
            if fresh:
                chosen.update(window_start=self._now, window_count=count)
            else:
                chosen.update(window_count=F("window_count") + count)
