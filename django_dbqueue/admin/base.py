"""The base class of the admin mixins, for the type checker only.

At run time ``QueueAdminBase`` is ``object``: a mixin adds nothing to the ``ModelAdmin`` it is
mixed into. Under mypy it is a ``ModelAdmin`` (the pattern django-stubs recommends for
``ModelAdmin`` mixins) that also declares what the mixins call on each other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django.contrib import admin
    from django.db.models import QuerySet
    from django.http import HttpRequest

    from ..queue.queryset import QueueQuerySet, QueueQuerySetMixin

    class QueueAdminBase(admin.ModelAdmin[Any]):
        dbqueue_fieldset: bool
        dbqueue_action_template: str

        def has_dbqueue_permission(self, request: HttpRequest) -> bool: ...
        def dbqueue_filter_errors(self, request: HttpRequest) -> list[str]: ...
        def dbqueue_queryset(self, queryset: QuerySet[Any]) -> QueueQuerySetMixin: ...
        def dbqueue_write_queryset(self) -> QueueQuerySet: ...
        def dbqueue_filtered_rows(self, request: HttpRequest) -> tuple[QueueQuerySetMixin, list[str]]: ...

else:
    QueueAdminBase = object
