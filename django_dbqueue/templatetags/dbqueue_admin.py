"""Template filters of the admin's pages: ``{% load dbqueue_admin %}``."""

from __future__ import annotations

from django import template

from ..admin.display import number

register = template.Library()


@register.filter(name="dbqueue_number")
def dbqueue_number(value: int | None) -> str:
    """A count with thousands separators (``300,436``)."""
    return "-" if value is None else number(value)
