"""Fair share and aging in the claim (issue #37), in-process on the real server: a quiet
tenant is not held back by a busy one, weights share a batch, priorities still order inside a
key, aging takes long-waiting rows first, and bad options get a system check. Real worker
processes: test_fair_processes.py."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from django.db import models
from django.test.utils import isolate_apps

from django_dbqueue.checks import _check_model
from django_dbqueue.fairness.options import fair_share_of
from django_dbqueue.models import CLAIM_INDEX_FIELDS, QueueMixin
from tests.conftest import every_database
from tests.testapp.models import AgedJob, FairJob, Tenant, TenantJob

pytestmark = [
    pytest.mark.django_db(transaction=True),
    every_database("the fair ranking is a window function each database runs in its own SQL"),
]


def customers(rows) -> list[str]:
    return [row.customer for row in rows]


def test_quiet_tenants_are_claimed_within_two_claim_cycles() -> None:
    FairJob.objects.bulk_create([FairJob(customer="busy") for _ in range(2000)])
    FairJob.objects.bulk_create([FairJob(customer=f"quiet{n}") for n in range(20) for _ in range(10)])
    # Two cycles of four workers claiming four rows each; short jobs: each batch finishes
    # before the next claim, so nothing is in flight and the round robin does the sharing.
    claimed = []
    for _ in range(8):
        batch = FairJob.objects.claim(4)
        claimed.append(customers(batch))
        for row in batch:
            row.mark_succeeded()
    assert {c for batch in claimed for c in batch} >= {f"quiet{n}" for n in range(20)}
    assert sum(batch.count("busy") for batch in claimed) <= 2  # its share, not every place


def test_rows_in_flight_count_against_their_key() -> None:
    FairJob.objects.bulk_create([FairJob(customer="a") for _ in range(20)])
    assert customers(FairJob.objects.claim(3)) == ["a"] * 3  # alone: it has every place
    FairJob.objects.bulk_create([FairJob(customer="b") for _ in range(20)])
    assert customers(FairJob.objects.claim(3)) == ["b"] * 3  # "a" holds three already


def test_weights_share_a_batch() -> None:
    for name in ("gold", "silver", "bronze"):
        FairJob.objects.bulk_create([FairJob(customer=name) for _ in range(100)])
    assert Counter(customers(FairJob.objects.claim(50))) == {"gold": 30, "silver": 10, "bronze": 10}


def test_priorities_still_order_within_a_key() -> None:
    FairJob.objects.bulk_create([FairJob(customer="a", queue_priority=0) for _ in range(3)])
    urgent = FairJob.objects.create(customer="a", queue_priority=10)
    FairJob.objects.create(customer="b", queue_priority=0)
    first = FairJob.objects.claim(2)
    assert urgent in first and sorted(customers(first)) == ["a", "b"]


def test_rows_without_a_key_share_as_one_key() -> None:
    FairJob.objects.bulk_create([FairJob(customer=None) for _ in range(10)])
    FairJob.objects.create(customer="x")
    assert sorted(customers(FairJob.objects.claim(2)), key=str) == [None, "x"]


def test_aging_takes_rows_waiting_past_the_bound_first() -> None:
    old = AgedJob.objects.bulk_create([AgedJob(customer="low", queue_priority=0) for _ in range(3)])
    AgedJob.objects.filter(pk__in=[row.pk for row in old]).reschedule(timedelta(seconds=-5))
    AgedJob.objects.bulk_create([AgedJob(customer="high", queue_priority=10) for _ in range(20)])
    assert customers(AgedJob.objects.claim(4)) == ["low", "low", "low", "high"]
    assert customers(AgedJob.objects.claim(4)) == ["high"] * 4  # nothing aged left: priority order


def test_aging_leaves_fresh_rows_in_priority_order() -> None:
    AgedJob.objects.bulk_create([AgedJob(customer="low", queue_priority=0) for _ in range(3)])
    AgedJob.objects.bulk_create([AgedJob(customer="high", queue_priority=10) for _ in range(3)])
    assert customers(AgedJob.objects.claim(3)) == ["high"] * 3


@isolate_apps("tests.testapp")
def test_bad_options_get_a_system_check() -> None:
    class BadFair(QueueMixin):
        customer = models.CharField(max_length=10)
        queue_fair_key = "tenant"
        queue_aging = -1

        class Meta(QueueMixin.Meta):
            app_label = "testapp"

    class BadWeights(QueueMixin):
        customer = models.CharField(max_length=10)
        queue_fair_key = "customer"
        queue_fair_weights = {"a": 0}

        class Meta(QueueMixin.Meta):
            app_label = "testapp"

    class AgingWithoutIndex(QueueMixin):
        queue_aging = 30

        class Meta(QueueMixin.Meta):
            app_label = "testapp"
            # The claim index alone: QueueMixin.Meta's due index would serve the aging read.
            indexes = [models.Index(fields=list(CLAIM_INDEX_FIELDS))]

    class FairWithoutIndexes(QueueMixin):
        customer = models.CharField(max_length=10)
        queue_fair_key = "customer"

        class Meta(QueueMixin.Meta):
            app_label = "testapp"

    found = {(m.id, m.msg.split(" ")[0]) for m in _check_model(BadFair)}
    assert ("django_dbqueue.E050", "testapp.BadFair.queue_aging") in found
    assert ("django_dbqueue.E050", "testapp.BadFair.queue_fair_key") in found
    assert [m.id for m in _check_model(BadWeights)] == ["django_dbqueue.E050", "django_dbqueue.W001"]
    assert "django_dbqueue.W050" in [m.id for m in _check_model(AgingWithoutIndex)]
    assert "django_dbqueue.W050" not in [m.id for m in _check_model(AgedJob)]
    assert "django_dbqueue.W051" in [m.id for m in _check_model(FairWithoutIndexes)]
    assert "django_dbqueue.W051" not in [m.id for m in _check_model(FairJob)]
    assert fair_share_of(FairJob) is not None and fair_share_of(FairJob).key == "customer"


def test_weights_from_the_tenants_table_with_a_concurrency_limit() -> None:
    big = Tenant.objects.create(name="big", fair_weight=2)
    small = Tenant.objects.create(name="small", fair_weight=0)  # not positive: weighs 1
    TenantJob.objects.bulk_create([TenantJob(tenant=t) for t in (big, small) for _ in range(10)])
    first = Counter(row.tenant.name for row in TenantJob.objects.claim(3))
    assert first == {"big": 2, "small": 1}
    # The limit (4 running per tenant) still holds over the fair order.
    later = Counter(row.tenant.name for row in TenantJob.objects.claim(10))
    assert later == {"big": 2, "small": 3}


def test_shares_follow_weights_across_claims_of_short_jobs() -> None:
    for name in ("gold", "silver", "bronze"):  # gold weighs 3, the others 1
        FairJob.objects.bulk_create([FairJob(customer=name) for _ in range(200)])
    taken: Counter[str] = Counter()
    for _ in range(40):  # each batch finished before the next claim: nothing in flight
        batch = FairJob.objects.claim(5)
        taken.update(customers(batch))
        for row in batch:
            row.mark_succeeded()
    assert {name: n / 200 for name, n in taken.items()} == {"gold": 0.6, "silver": 0.2, "bronze": 0.2}
