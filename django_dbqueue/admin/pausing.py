"""Pause and resume a queue from the admin (issue #22): a button on the changelist and the
dashboard, and the paused state shown on both.

The buttons POST to one view that calls :func:`django_dbqueue.flow.pause` / ``resume``: the
same rows ``manage.py queuectl`` and the Python API write, read by every host's workers within
one poll interval. Running jobs finish; nothing else is changed.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import path, reverse
from django.utils.translation import gettext_lazy as _

from ..flow import pauses
from .base import QueueAdminBase


class PauseAdminMixin(QueueAdminBase):
    def _dbqueue_name(self, view: str) -> str:
        return f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_{view}"

    def dbqueue_pause_urls(self) -> list[Any]:
        name = f"{self.opts.app_label}_{self.opts.model_name}_dbqueue_pause"
        return [path("dbqueue/pause/", self.admin_site.admin_view(self.dbqueue_pause_view), name=name)]

    def dbqueue_pause_context(self, request: HttpRequest) -> dict[str, Any]:
        """The paused state as the database holds it now (not the workers' cached copy)."""
        queues = pauses.paused_queues(self.model)
        return {
            "paused": "" in queues,
            "paused_queues": [queue for queue in queues if queue],
            "pause_url": reverse(self._dbqueue_name("dbqueue_pause")),
            "can_pause": self.has_dbqueue_permission(request),
        }

    def dbqueue_pause_view(self, request: HttpRequest) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_dbqueue_permission(request):
            raise PermissionDenied
        action, queue = request.POST.get("operation"), request.POST.get("queue", "")
        label = self.opts.verbose_name_plural
        where = f"{label} ({queue})" if queue else str(label)
        try:
            if action == "pause":
                pauses.pause(self.model, queue, by=f"user:{request.user.get_username()}")
                text = _(
                    "Paused %(where)s: workers stop claiming within one poll interval; running jobs finish."
                )
                self.message_user(request, text % {"where": where}, messages.SUCCESS)
            elif action == "resume":
                pauses.resume(self.model, queue)
                self.message_user(request, _("Resumed %(where)s.") % {"where": where}, messages.SUCCESS)
            else:
                self.message_user(request, _("Unknown action: nothing was changed."), messages.ERROR)
        except (ValueError, TypeError) as exc:
            self.message_user(request, str(exc), messages.ERROR)
        return HttpResponseRedirect(reverse(self._dbqueue_name("changelist")))
