"""Queue models for the Spark pipeline tests: rows keyed by a UNIQUE business key."""

from __future__ import annotations

from django.db import models

from django_dbqueue.models import QueueMixin


class AccountSync(QueueMixin):
    """An account to re-sync, keyed by the account id (what a nightly Spark job produces)."""

    account_id = models.BigIntegerField(unique=True)
    email = models.CharField(max_length=200, default="")
    seen_at = models.DateTimeField(null=True, blank=True)
    handled = models.IntegerField(default=0)

    def process(self) -> None:
        self.handled += 1
        self.save()


class Delivery(QueueMixin):
    """A composite business key (a UniqueConstraint) and no default on a required column."""

    campaign = models.CharField(max_length=50)
    recipient = models.CharField(max_length=100)
    subject = models.CharField(max_length=200)

    class Meta(QueueMixin.Meta):
        constraints = [
            models.UniqueConstraint(fields=["campaign", "recipient"], name="sparkapp_delivery_key")
        ]

    def process(self) -> None:
        pass
