"""A shop whose orders are their own queue: each Order row is fulfilled by ``process()``."""

from __future__ import annotations

from decimal import Decimal

from django.db import models
from django.utils import timezone

from django_dbqueue.exceptions import Discard
from django_dbqueue.models import QueueMixin
from django_dbqueue.retry import ExponentialBackoff


class PaymentDeclined(Exception):
    """A transient failure: the payment provider said no, try again later."""


class CrmRejected(Exception):
    """The CRM refused a customer record (the demo's blocked country): retried, then failed."""


class Customer(models.Model):
    name = models.CharField(max_length=100)
    country = models.CharField(max_length=2, default="DE")

    def __str__(self) -> str:
        return self.name


class Order(QueueMixin):
    customer = models.ForeignKey(Customer, on_delete=models.CASCADE, related_name="orders")
    total = models.DecimalField(max_digits=10, decimal_places=2)
    status = models.CharField(max_length=20, default="new")
    created = models.DateTimeField(auto_now_add=True)

    # The invoice and the status change commit with the queue outcome, exactly once.
    queue_atomic = True
    # Demo-fast retries: 0.2 s, 0.4 s, then give up (FAILED, reason kept).
    queue_retry = ExponentialBackoff(base=0.2, factor=2, max_delay=5, max_attempts=3)

    class Meta(QueueMixin.Meta):
        ordering = ["-id"]
        # The columns the shop's operators filter by in the admin (docs/admin.md, "A million
        # rows"): the status filter, and the "finished" date range, which the list then shows
        # newest first from the index instead of walking the primary key — alone, or with a
        # state (failed orders of last Tuesday: the list, its count and "select all").
        indexes = [
            *QueueMixin.Meta.indexes,
            models.Index(fields=["status"], name="shop_order_status"),
            models.Index(fields=["queue_finished_at"], name="shop_order_finished"),
            models.Index(fields=["queue_state", "queue_finished_at"], name="shop_order_state_finished"),
        ]

    def __str__(self) -> str:
        return f"Order {self.pk} ({self.customer_id}, {self.total})"

    def process(self) -> None:
        # Big orders of one customer are declined on their first attempt: they show retries.
        if self.total >= Decimal("950") and self.queue_attempts == 1:
            raise PaymentDeclined(f"card declined for {self.total}; will retry")
        # An order to a blocked country can never succeed: Discard ends it FAILED at once,
        # with the reason kept for the operator.
        if self.customer.country == "XX":
            raise Discard(f"cannot ship to country {self.customer.country!r}")
        Invoice.objects.create(order=self, amount=(self.total * Decimal("1.19")).quantize(Decimal("0.01")))
        self.status = "fulfilled"
        self.save()  # writes domain fields only; the queue columns belong to the worker


class Invoice(models.Model):
    order = models.OneToOneField(Order, on_delete=models.CASCADE)
    amount = models.DecimalField(max_digits=12, decimal_places=2)
    issued = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"Invoice for order {self.order_id}: {self.amount}"


class CustomerSync(QueueMixin):
    """Push one customer's record to the CRM: the bulk-enqueue demo of the Spark pipeline.

    ``customer`` is unique, so a load of "customers to resync" is idempotent: run
    ``queue_spark_enqueue shop.CustomerSync --table shop_customer --columns id:customer``
    twice and the second run inserts nothing (``enqueue_dataframe`` refuses a model
    without such a key). See docs/spark.md."""

    customer = models.OneToOneField(Customer, on_delete=models.CASCADE, related_name="sync")
    synced_at = models.DateTimeField(null=True, blank=True)

    queue_retry = ExponentialBackoff(base=0.2, factor=2, max_delay=5, max_attempts=3)

    def __str__(self) -> str:
        return f"CRM sync of customer {self.customer_id}"

    def process(self) -> None:
        if self.customer.country == "XX":
            # The customer id in the message varies per row: the report groups them as one error.
            raise CrmRejected(f"CRM rejected customer {self.customer_id}: country {self.customer.country!r}")
        self.synced_at = timezone.now()
        self.save()
