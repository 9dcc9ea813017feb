"""Fair and aging claims on a database other than the default: their statements are compiled
for the database they run on (``backends.compiled``). Compiled for the default one, a locking
SELECT checked that the *default* connection was in a transaction and the claim failed
("select_for_update cannot be used outside of a transaction"), as the scale benchmark's
claims on its second database did."""

from __future__ import annotations

import pytest
from django.conf import settings

from django_dbqueue.states import QueueState
from tests.features.fairness.scenarios import aged_and_fresh
from tests.testapp.models import AgedJob, FairJob

pytestmark = [
    pytest.mark.skipif(
        "other" not in settings.DATABASES,
        reason="needs the second database: DBQUEUE_TEST_SECOND_DATABASE=1 (make's contract passes run it)",
    ),
    pytest.mark.django_db(transaction=True, databases=["default", "other"]),
]


def test_an_aging_claim_on_another_database_takes_its_aged_rows_first() -> None:
    rows = AgedJob.objects.using("other")
    old, fresh = aged_and_fresh(2, 3, rows)
    taken = rows.claim(4)
    assert [row.pk for row in taken] == [old[0].pk, old[1].pk, fresh[0].pk, fresh[1].pk]
    assert rows.filter(queue_state=QueueState.RUNNING).count() == 4
    assert not AgedJob.objects.exists()  # nothing on the default database


def test_a_fair_claim_on_another_database_serves_every_key() -> None:
    rows = FairJob.objects.using("other")
    rows.bulk_create([FairJob(customer="big") for _ in range(20)] + [FairJob(customer="small")])
    taken = rows.claim(4)
    assert {row.customer for row in taken} == {"big", "small"}
    assert rows.filter(queue_state=QueueState.RUNNING).count() == 4
    assert not FairJob.objects.exists()
