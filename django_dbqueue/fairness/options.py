"""What a model declares for fair share and aging, and what is wrong with it.

Class attributes, like the per-key limits (docs/fair-share.md)::

    class Order(QueueMixin):
        customer = models.ForeignKey(Customer, ...)
        queue_fair_key = "customer"                 # a concrete field: the row's tenant
        queue_fair_weights = "customer__fair_weight"  # or a mapping, or a callable; default 1
        queue_aging = 30                            # seconds: a row due longer is taken first

The attributes are code (class attributes), never text read from a row: a weights path names
a field through the key's relation, and is resolved by the ORM as any lookup is.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.core.exceptions import FieldDoesNotExist, ImproperlyConfigured
from django.db import models

ATTRIBUTES = ("queue_fair_key", "queue_fair_weights", "queue_aging")
#: The weight of a key no weight names (and of a row with no key).
DEFAULT_WEIGHT = 1.0


@dataclass(frozen=True)
class FairShare:
    """A model's claim order options; ``key`` is the column attribute (``customer_id``)."""

    key: str | None
    weights: Mapping[Any, float] | Callable[..., Mapping[Any, float]] | str | None
    aging: timedelta | None


def _seconds(value: Any) -> timedelta | None:
    if isinstance(value, timedelta):
        return value if value > timedelta(0) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return timedelta(seconds=value)
    return None


def _key_field(model: type[models.Model], name: str) -> models.Field | None:
    return next((f for f in model._meta.concrete_fields if name in (f.name, f.attname)), None)


def _weights_problem(model: type[models.Model], weights: Any) -> str | None:
    label = model._meta.label
    if weights is None or callable(weights):
        return None
    if isinstance(weights, Mapping):
        bad = [w for w in weights.values() if not positive_number(w)]
        return (
            f"{label}.queue_fair_weights has weights that are not positive numbers: {bad[:3]!r}"
            if bad
            else None
        )
    if isinstance(weights, str):
        return _path_problem(model, weights)
    return (
        f"{label}.queue_fair_weights must be a mapping of keys to weights, a callable returning one, "
        f"or the path of a numeric field through the key (e.g. 'customer__fair_weight'), not {weights!r}"
    )


def _path_problem(model: type[models.Model], path: str) -> str | None:
    """A weights path must start at the fair key's relation and end at a number."""
    label, key = model._meta.label, getattr(model, "queue_fair_key", None)
    first, _, rest = path.partition("__")
    field = _key_field(model, key) if isinstance(key, str) else None
    if field is None or first != field.name or not rest or field.related_model is None:
        return (
            f"{label}.queue_fair_weights = {path!r} must name a field through the fair key's relation "
            f"('<key>__<field>', the key being a ForeignKey), or be a mapping or a callable"
        )
    target: Any = field.related_model
    parts = rest.split("__")
    for number, part in enumerate(parts):
        try:
            found = target._meta.get_field(part)
        except FieldDoesNotExist:
            return f"{label}.queue_fair_weights = {path!r}: {target.__name__} has no field {part!r}"
        if number < len(parts) - 1:
            if found.related_model is None:
                return f"{label}.queue_fair_weights = {path!r}: {part!r} is not a relation"
            target = found.related_model
        elif not isinstance(found, (models.IntegerField, models.FloatField, models.DecimalField)):
            kind = type(found).__name__
            return f"{label}.queue_fair_weights = {path!r} must end at a numeric field, not {kind}"
    return None


def positive_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def problems(model: type[models.Model]) -> list[str]:
    """What is wrong with a model's fair share and aging options, as sentences."""
    key = getattr(model, "queue_fair_key", None)
    weights = getattr(model, "queue_fair_weights", None)
    aging = getattr(model, "queue_aging", None)
    label = model._meta.label
    found = []
    if aging is not None and _seconds(aging) is None:
        found.append(
            f"{label}.queue_aging must be a positive number of seconds or a timedelta, not {aging!r}"
        )
    if key is None:
        if weights is not None:
            found.append(f"{label} declares queue_fair_weights but no queue_fair_key: name the tenant field")
        return found
    if not isinstance(key, str) or _key_field(model, key) is None:
        found.append(
            f"{label}.queue_fair_key must name a concrete field of the model (e.g. 'customer'), not {key!r}: "
            "the key must be stored on the row"
        )
        return found
    problem = _weights_problem(model, weights)
    return [*found, problem] if problem else found


@functools.cache
def fair_share_of(model: type[models.Model]) -> FairShare | None:
    """The model's options, or None when it declares none (the plain claim order)."""
    if all(getattr(model, name, None) is None for name in ATTRIBUTES):
        return None
    found = problems(model)
    if found:
        raise ImproperlyConfigured(found[0])
    key = getattr(model, "queue_fair_key", None)
    field = _key_field(model, key) if key is not None else None
    return FairShare(
        key=field.attname if field is not None else None,
        weights=getattr(model, "queue_fair_weights", None),
        aging=_seconds(getattr(model, "queue_aging", None)),
    )
