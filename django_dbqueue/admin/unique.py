"""Bulk actions on a model with a unique key (see :mod:`django_dbqueue.flow.unique`).

"Retry now" and "Enqueue again" make finished rows active again in one UPDATE; if one of them
would take a key that an active row holds, the database refuses the whole statement. The
operator is told so, and nothing is changed (the statement runs behind a savepoint, so the
request's transaction, if any, stays usable).
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.db import IntegrityError, models, transaction
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from ..flow import unique
from .actions import ActionsAdminMixin

#: What the operator reads when a bulk action would duplicate an active key.
DUPLICATE_KEY = _(
    "Nothing was changed: some of these %(names)s have the unique key of an active (ready or "
    "running) one, and the database refused the whole action. Act on them one by one, or "
    "cancel the active ones first. (%(error)s)"
)


class UniqueKeyAdminMixin(ActionsAdminMixin):
    """Turns a unique key's refusal into a message; mixed into ``QueueAdminMixin``."""

    def dbqueue_bulk(self, request: HttpRequest, queryset: models.QuerySet, name: str) -> Any:
        if unique.key_field(self.model) is None:  # nothing to refuse: no savepoint around it
            return super().dbqueue_bulk(request, queryset, name)
        try:
            with transaction.atomic(using=queryset.db):
                return super().dbqueue_bulk(request, queryset, name)
        except IntegrityError as exc:
            self.dbqueue_duplicate_key(request, exc)
            return None

    def dbqueue_duplicate_key(self, request: HttpRequest, exc: IntegrityError) -> None:
        text = DUPLICATE_KEY % {"names": self.opts.verbose_name_plural, "error": exc}
        self.message_user(request, text, messages.ERROR)
