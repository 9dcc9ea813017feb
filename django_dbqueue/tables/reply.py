"""``Reply``: a request's reply slot (request-reply, docs/messaging.md; the protocol is in
:mod:`django_dbqueue.messaging.reply`)."""

from __future__ import annotations

from django.db import models


class Reply(models.Model):
    """A request's reply slot: created empty with the request, filled once by its handler,
    deleted when the caller reads it, times out, or (caller gone) when it expires."""

    request_id = models.BigIntegerField(unique=True)
    replied = models.BooleanField(default=False)
    payload = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        app_label = "django_dbqueue"

    def __str__(self) -> str:
        return f"reply to #{self.request_id} ({'replied' if self.replied else 'waiting'})"
