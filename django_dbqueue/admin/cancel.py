"""Cancelling RUNNING rows from the admin: an action over the selection, and a button on a
running row's page (:mod:`.rows`). Both only *ask* (see :mod:`django_dbqueue.flow.cancellation`):
the worker holding the row stops its handler at its next lease renewal and ends it CANCELLED.

No confirmation page, even for "select all": the action writes nothing on the queue rows, and
asks for at most the rows running now (a few per worker), whatever the filter matches.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db import models
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from .actions import ActionsAdminMixin
from .display import number

#: What the operator is told happens next.
NEXT = _("they end cancelled at their worker's next lease renewal")


class CancelAdminMixin(ActionsAdminMixin):
    """The "Cancel running" action; mixed into ``QueueAdminMixin``."""

    @admin.action(description=_("Cancel running (stop their workers)"), permissions=["dbqueue"])
    def dbqueue_cancel_running(self, request: HttpRequest, queryset: models.QuerySet) -> Any:
        qs = self.dbqueue_queryset(queryset)
        asked = qs.cancel_running(requested_by=request.user.get_username())
        across = request.POST.get("select_across") == "1"
        selected = len(set(request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)))
        text = ngettext(
            "Asked the worker of %(n)s running %(name)s to stop it",
            "Asked the workers of %(n)s running %(names)s to stop them",
            asked,
        ) % {"n": number(asked), "name": self.opts.verbose_name, "names": self.opts.verbose_name_plural}
        if asked:
            text = f"{text}: {NEXT}."
        if not across and selected > asked:
            skipped = _("%(n)s not running were left unchanged (Cancel ends waiting ones).") % {
                "n": number(selected - asked)
            }
            text = f"{text} {skipped}"
        self.message_user(request, text, messages.SUCCESS if asked else messages.WARNING)
        return None
