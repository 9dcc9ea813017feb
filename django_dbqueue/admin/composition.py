"""A queue row's batch, parents and dependants on its admin page (docs/composition.md)."""

from __future__ import annotations

from typing import Any

from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from ..composition.chains import dependants_of, parents_of

#: Links shown per list; a row with thousands of dependants shows the first ones and a count.
SHOWN = 50


def _link(label: str, pk: Any, text: str) -> SafeString:
    app_label, model_name = label.split(".")
    try:
        url = reverse(f"admin:{app_label}_{model_name}_change", args=[pk])
    except NoReverseMatch:
        return format_html("{}", text)
    return format_html('<a href="{}">{}</a>', url, text)


def _jobs(edges: list[tuple[str, str, bool]], settled_text: str) -> SafeString:
    if not edges:
        return mark_safe("-")
    shown = format_html_join(
        ", ",
        "{}{}",
        (
            (_link(label, pk, f"{label} {pk}"), f" ({settled_text})" if settled else "")
            for label, pk, settled in edges[:SHOWN]
        ),
    )
    more = format_html(" … and {} more", len(edges) - SHOWN) if len(edges) > SHOWN else ""
    return format_html("{}{}", shown, more)


def composition_html(obj: Any) -> SafeString:
    """Batch (with a link to its progress), parents and dependants of ``obj``."""
    if obj is None or obj.pk is None:
        return mark_safe("-")
    batch = (
        _link("django_dbqueue.batch", obj.queue_batch, f"batch {obj.queue_batch}") if obj.queue_batch else "-"
    )
    parents = _jobs(parents_of(obj), "counted")
    dependants = _jobs(dependants_of(obj), "told") if obj.queue_dependants else mark_safe("-")
    return format_html(
        "<div>Batch: {}</div><div>Runs after: {}</div><div>Dependants: {}</div>", batch, parents, dependants
    )
