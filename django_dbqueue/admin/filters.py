"""The queue's list filters, and how the changelist tells a person that a filter is invalid.

Range filters come from django-admin-rangefilter. Its date-time range needs a time as well
as a date, and when the time box is empty it ignores the whole range (the list stays
unfiltered, the error shows far down the sidebar): ``WholeDayRangeFilter`` reads a date
without a time as the whole day — from 00:00 for "from", to 23:59:59.999999 for "to".
"""

from __future__ import annotations

from collections import OrderedDict
from datetime import datetime, time
from typing import Any

from django import forms
from django.contrib import admin
from django.db import models
from django.http import HttpRequest
from django.utils.timezone import make_aware
from django.utils.translation import gettext_lazy as _
from rangefilter.filters import AdminSplitDateTime, DateTimeRangeFilter

from ..states import QueueState


class HasErrorFilter(admin.SimpleListFilter):
    """Rows with or without a last error, by ``queue_has_error`` (a column the database keeps
    from ``queue_last_error``) and its index: the capped count reads index entries (on InnoDB
    not a row: its entries carry the primary key, in key order, which also serves the newest
    page). At 10,000,000 orders on MariaDB "with an error" had read a row per candidate through
    the state index (50,000 rows, 567 ms of SQL on a quiet machine)."""

    title = _("last error")
    parameter_name = "queue_has_error"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("yes", _("With an error")), ("no", _("Without an error"))]

    def queryset(self, request: HttpRequest, queryset: models.QuerySet) -> models.QuerySet:
        if self.value() not in ("yes", "no"):
            return queryset
        filtered = queryset.filter(queue_has_error=self.value() == "yes")
        if self.value() == "yes" and not has_error_index(queryset.model):
            # A model whose Meta dropped the index (its own ``indexes`` without QueueMixin's):
            # a success clears the error, so naming the other states lets the state index skip
            # SUCCEEDED rows (most of a big table) instead of a full scan.
            others = [state for state in QueueState.values if state != QueueState.SUCCEEDED]
            return filtered.filter(queue_state__in=others)
        return filtered


def has_error_index(model: type[models.Model]) -> bool:
    """Whether an index of ``model`` starts with ``queue_has_error``."""
    return any(list(index.fields[:1]) == ["queue_has_error"] for index in model._meta.indexes)


class QueueStateFilter(admin.SimpleListFilter):
    """The queue state, by its label. The column carries no ``choices`` (a new state needs no
    migration in the apps that use the mixin), so the states come from ``QueueState``; the
    parameter is the one Django's choices filter used, so saved links keep working."""

    title = _("queue state")
    parameter_name = "queue_state__exact"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return list(QueueState.choices)

    def queryset(self, request: HttpRequest, queryset: models.QuerySet) -> models.QuerySet:
        return queryset if self.value() is None else queryset.filter(queue_state=self.value())


class DayOrDateTimeField(forms.SplitDateTimeField):
    """A date and a time, or a date alone: the start (or, with ``end=True``, the last
    microsecond) of that day in the current time zone."""

    def __init__(self, *args: Any, end: bool = False, **kwargs: Any) -> None:
        self.end = end
        super().__init__(*args, **kwargs)

    def compress(self, data_list: Any) -> datetime | None:
        if data_list and data_list[0] not in self.empty_values and data_list[1] in self.empty_values:
            return make_aware(datetime.combine(data_list[0], time.max if self.end else time.min))
        return super().compress(data_list)


class WholeDayRangeFilter(DateTimeRangeFilter):
    """rangefilter's date-time range, where a date without a time means the whole day."""

    def _get_form_fields(self) -> OrderedDict[str, forms.Field]:
        fields: OrderedDict[str, forms.Field] = OrderedDict()
        for name, end, placeholder, initial in (
            (self.lookup_kwarg_gte, False, _("From date"), self.default_gte),
            (self.lookup_kwarg_lte, True, _("To date"), self.default_lte),
        ):
            fields[name] = DayOrDateTimeField(
                label="",
                widget=AdminSplitDateTime(attrs={"placeholder": placeholder}),
                localize=True,
                required=False,
                initial=initial,
                end=end,
            )
        return fields


def filter_errors(changelist: Any) -> list[str]:
    """The changelist's list filters that could not be applied, as sentences: a filter with
    a form (the range filters) whose input is invalid leaves the list unfiltered by it."""
    errors = []
    for spec in getattr(changelist, "filter_specs", ()):
        form = getattr(spec, "form", None)
        if isinstance(form, forms.BaseForm) and form.is_bound and not form.is_valid():
            problems = sorted({str(m) for messages in form.errors.values() for m in messages})
            errors.append(
                _("The filter “%(title)s” was not applied: %(problems)s")
                % {"title": spec.title, "problems": " ".join(problems)}
            )
    return errors


class CollapsedFilterMixin:
    """A list filter drawn closed in the sidebar until it is used (the rarely needed ones).

    Its own template (Django's, or rangefilter's) draws it in a ``<details open>``; the wrapping
    template closes that ``<details>`` right after it, before Django's ``filters.js`` restores
    what the person opened or closed themselves in this browser tab. A filter in use stays open."""

    template = "admin/django_dbqueue/filter_collapsed.html"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        request = next((a for a in args if isinstance(a, HttpRequest)), kwargs.get("request"))
        self.dbqueue_csp_nonce = getattr(request, "csp_nonce", "")

    @property
    def dbqueue_inner_template(self) -> str:
        for klass in type(self).__mro__:
            if klass is CollapsedFilterMixin or "template" not in vars(klass):
                continue
            template = vars(klass)["template"]
            if isinstance(template, property) and template.fget is not None:  # rangefilter's
                return str(template.fget(self))
            return str(template)
        return "admin/filter.html"

    @property
    def dbqueue_in_use(self) -> bool:
        used = getattr(self, "used_parameters", {})
        return any(value not in (None, "", []) for value in used.values())


def collapsed(filter_class: type) -> type:
    """``filter_class`` drawn closed until used (see :class:`CollapsedFilterMixin`)."""
    return type(f"Collapsed{filter_class.__name__}", (CollapsedFilterMixin, filter_class), {})
