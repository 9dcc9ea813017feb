"""``manage.py shopdemo``: enqueue orders, drain them with runqueue, print what happened."""

from __future__ import annotations

import random
import time
from decimal import Decimal
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser
from django.db import connection
from django.db.models import Count, Min

from django_dbqueue.backends import DbNow
from django_dbqueue.states import QueueState
from shop.models import Customer, Invoice, Order


class Command(BaseCommand):
    help = "Create N orders (each is a queue item), process them all with runqueue, summarise."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--orders", type=int, default=3000)
        parser.add_argument("--concurrency", type=int, default=2)

    def handle(self, *args: Any, orders: int, concurrency: int, **options: Any) -> None:
        rng = random.Random(42)
        customers = Customer.objects.bulk_create([Customer(name=f"customer {i}") for i in range(50)])
        blocked = Customer.objects.create(name="blocked customer", country="XX")
        started = time.monotonic()
        Order.objects.bulk_create(
            [
                Order(
                    customer=blocked if i % 1000 == 999 else rng.choice(customers),
                    total=Decimal(rng.randint(5, 999)),
                )
                for i in range(orders)
            ],
            batch_size=1000,
        )
        self.stdout.write(f"enqueued {orders} orders in {time.monotonic() - started:.2f}s")

        started = time.monotonic()
        while True:
            call_command("runqueue", "shop.Order", "--burst", "--concurrency", str(concurrency), verbosity=0)
            # Retries wait out their backoff: come back when the next one is due.
            waiting = Order.objects.filter(queue_state=QueueState.READY)
            if not waiting.exists():
                break
            next_due = waiting.aggregate(at=Min("queue_run_at"))["at"]
            now = Order.objects.annotate(now=DbNow()).values_list("now", flat=True).first()
            time.sleep(max((next_due - now).total_seconds(), 0.05))
        elapsed = time.monotonic() - started

        counts = dict(Order.objects.values_list("queue_state").annotate(n=Count("id")))
        retried = Order.objects.filter(queue_attempts__gt=1).count()
        self.stdout.write(
            f"processed in {elapsed:.2f}s ({orders / elapsed:.0f} orders/s, "
            f"{concurrency} worker processes, {connection.vendor})"
        )
        for state in QueueState:
            if counts.get(state):
                self.stdout.write(f"  {state.label:<10} {counts[state]}")
        self.stdout.write(f"  retried    {retried} (payment declined on the first attempt, then paid)")
        self.stdout.write(f"  invoices   {Invoice.objects.count()}")
        failed = Order.objects.filter(queue_state=QueueState.FAILED).first()
        if failed:
            reason = failed.queue_last_error.strip().splitlines()[-1]
            self.stdout.write(f"  a failed order keeps its reason: {reason}")
