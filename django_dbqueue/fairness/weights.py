"""A key's weight, as an SQL expression the fair ranking divides by.

Three ways a model gives weights (``queue_fair_weights``):

* a mapping ``{key: weight}``: only keys that differ from the default need an entry;
* a callable returning such a mapping, called once per claim (read your tiers table, a
  cache, settings...);
* the path of a numeric field through the key's relation (``"customer__fair_weight"``):
  the ranking joins the key's table, so thousands of weighted keys cost a join, not a
  thousand-branch CASE.

A weight that is not a positive number counts as the default (1): a bad value from a
callable or a table is logged once per claim and never stops the claim.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from django.db import models
from django.db.models import Case, F, Q, Value, When
from django.db.models.functions import Cast

from .options import DEFAULT_WEIGHT, FairShare, positive_number

logger = logging.getLogger("django_dbqueue.fairness")


def weight_expression(model: type[models.Model], fair: FairShare) -> Any:
    """The weight of each row's key (a float expression)."""
    weights = fair.weights
    if weights is None or fair.key is None:
        return Value(DEFAULT_WEIGHT)
    if isinstance(weights, str):
        column = Cast(F(weights), models.FloatField())
        return Case(When(Q(**{f"{weights}__gt": 0}), then=column), default=Value(DEFAULT_WEIGHT))
    table = weights() if callable(weights) else weights
    return _case(model, fair.key, table)


def weight_table(model: type[models.Model], fair: FairShare) -> dict[Any, float]:
    """The weights that differ from 1, by key, for a mapping or a callable (called once);
    a path through the key's relation is read by the ranking's join instead (empty here)."""
    weights = fair.weights
    if weights is None or isinstance(weights, str):
        return {}
    return _valid(model, weights() if callable(weights) else weights)


def _valid(model: type[models.Model], table: Any) -> dict[Any, float]:
    if not isinstance(table, Mapping):
        logger.error(
            "%s.queue_fair_weights returned %r, not a mapping: every key weighs 1", model._meta.label, table
        )
        return {}
    valid, bad = {}, []
    for value, weight in table.items():
        if not positive_number(weight):
            bad.append(value)
        elif float(weight) != DEFAULT_WEIGHT:
            valid[value] = float(weight)
    if bad:
        logger.error(
            "%s: keys %r have weights that are not positive numbers: they weigh 1", model._meta.label, bad[:5]
        )
    return valid


def _case(model: type[models.Model], key: str, table: Any) -> Any:
    whens = [When(Q(**{key: value}), then=Value(weight)) for value, weight in _valid(model, table).items()]
    if not whens:
        return Value(DEFAULT_WEIGHT)
    return Case(*whens, default=Value(DEFAULT_WEIGHT), output_field=models.FloatField())
