"""Template filters of the admin's pages: ``{% load dbqueue_admin %}``."""

from __future__ import annotations

import django
from django import template

from ..admin.display import number

register = template.Library()


@register.filter(name="dbqueue_number")
def dbqueue_number(value: int | None) -> str:
    """A count with thousands separators (``300,436``)."""
    return "-" if value is None else number(value)


#: Django 6.1 draws the admin's breadcrumbs as an ordered list (``<ol class="breadcrumbs">``
#: of ``<li>``, separators drawn by its CSS) and styles only that; 5.2 and 6.0 draw a
#: ``<div class="breadcrumbs">`` of links with ``&rsaquo;`` between them, and style only that.
#: The queue's own pages copy whichever markup the installed admin's templates use.
ADMIN_BREADCRUMBS_LISTED = django.VERSION >= (6, 1)


@register.simple_tag
def dbqueue_breadcrumbs_listed() -> bool:
    """Whether this Django's admin draws breadcrumbs as ``<ol>`` (see ``breadcrumbs.html``)."""
    return ADMIN_BREADCRUMBS_LISTED
