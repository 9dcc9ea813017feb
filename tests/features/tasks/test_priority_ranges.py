"""Every way of writing a priority checks the model's range (issue #31, item 10).

A ``django.tasks`` record takes -100..100 (Django's ``TASK_MIN_PRIORITY``..``TASK_MAX_PRIORITY``):
one outside it was accepted by ``reprioritize()`` and the row failed when it ran. A plain queue
model takes what its 32-bit column holds, or the ``queue_priority_range`` it declares. Real
databases; nothing is changed by a refused call.
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from django_dbqueue.models import Message, TaskRecord
from django_dbqueue.priorities import PRIORITY_RANGE
from django_dbqueue.states import QueueState
from tests.testapp.models import Ticket

pytestmark = pytest.mark.django_db(transaction=True)


def record(**fields) -> TaskRecord:
    return TaskRecord.objects.create(task_path="tests.testapp.tasks.add", args=[1, 2], **fields)


def priorities(model) -> list[int]:
    return sorted(model.objects.values_list("queue_priority", flat=True))


@pytest.mark.parametrize("priority", [101, -101, 500])
def test_task_records_refuse_a_priority_django_tasks_has_not(priority) -> None:
    row = record(queue_priority=5)
    idle = record(queue_state=QueueState.SUCCEEDED)
    calls = [
        lambda: TaskRecord.objects.reprioritize(priority),
        lambda: TaskRecord.objects.filter(pk=idle.pk).enqueue(priority=priority),
        lambda: idle.enqueue(priority=priority),
        lambda: TaskRecord(task_path="tests.testapp.tasks.add").enqueue(priority=priority),
        lambda: TaskRecord.objects.bulk_enqueue([TaskRecord(task_path="x.y", queue_priority=priority)]),
    ]
    for call in calls:
        with pytest.raises(
            ValueError, match=r"priority of django_dbqueue\.TaskRecord must be between -100 and 100"
        ):
            call()
    assert priorities(TaskRecord) == [0, 5]
    assert TaskRecord.objects.get(pk=idle.pk).queue_state == QueueState.SUCCEEDED
    # The edges are taken.
    assert TaskRecord.objects.reprioritize(100) == 2
    assert TaskRecord.objects.filter(pk=row.pk).enqueue(priority=-100) == 1
    assert priorities(TaskRecord) == [-100, 100]


def test_a_plain_queue_model_takes_its_columns_range_or_the_one_it_declares(monkeypatch) -> None:
    low, high = PRIORITY_RANGE
    ticket = Ticket.objects.create(subject="t")
    for priority in (high + 1, low - 1):
        with pytest.raises(ValueError, match="must be between"):
            Ticket.objects.reprioritize(priority)
        with pytest.raises(ValueError, match="must be between"):
            Ticket(subject="new").enqueue(priority=priority)
    assert Ticket.objects.reprioritize(high) == 1
    # A model that declares a narrower range gets it everywhere (the attribute is read per call).
    monkeypatch.setattr(Ticket, "queue_priority_range", (0, 10), raising=False)
    with pytest.raises(ValueError, match=r"priority of testapp\.Ticket must be between 0 and 10, got 11"):
        Ticket.objects.reprioritize(11)
    with pytest.raises(ValueError, match="between 0 and 10"):
        Ticket.objects.bulk_enqueue([{"subject": "x", "queue_priority": -1}])
    assert priorities(Ticket) == [high]
    assert Ticket.objects.reprioritize(10) == 1
    assert Ticket.objects.count() == 1 and ticket.pk


@pytest.mark.parametrize("priority", [2**31, -(2**31) - 1])
def test_publish_refuses_a_priority_the_column_cannot_hold(priority) -> None:
    calls = [
        lambda: Message.objects.publish("test.echo", {}, priority=priority),
        lambda: Message.objects.publish("test.echo", {}, key="k", priority=priority),
        lambda: Message.objects.publish_to_topic("test.topic", {}, priority=priority),
        lambda: Message.objects.publish_many([{"kind": "test.echo", "priority": priority}]),
    ]
    for call in calls:
        with pytest.raises(ValueError, match=r"priority of django_dbqueue\.Message must be between"):
            call()
    assert not Message.objects.exists()
    assert Message.objects.publish("test.echo", {}, priority=2**31 - 1).created


def test_the_admins_reprioritize_form_takes_the_models_range(admin_client) -> None:
    rows = [record(queue_priority=3), record(queue_priority=-3)]
    url = reverse("admin:django_dbqueue_taskrecord_changelist")
    data = {
        "action": "dbqueue_reprioritize",
        "_selected_action": [row.pk for row in rows],
        "select_across": "0",
        "dbqueue_apply": "1",
    }
    response = admin_client.post(url, {**data, "priority": "500"}, follow=True)
    assert response.status_code == 200
    assert b"dbqueue-action-form" in response.content
    assert b"less than or equal to 100" in response.content
    assert priorities(TaskRecord) == [-3, 3]
    admin_client.post(url, {**data, "priority": "100"}, follow=True)
    assert priorities(TaskRecord) == [100, 100]
