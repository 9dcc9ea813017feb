"""The dead-letter console (issue #37): failed rows by masked error, computed by the database;
one group replayed in one UPDATE, confirmed by its exact count, its attempt history kept; a
forged replay without the change permission, or with a stale count, changes nothing."""

from __future__ import annotations

import functools
import json

import django
import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_dbqueue.models import Message, QueueAttempt, TaskRecord
from django_dbqueue.states import QueueState
from tests.testapp.models import Job

pytestmark = pytest.mark.django_db
URL = "admin:testapp_job_dbqueue_dead_letters"
GROUPS = [
    "ValueError: account {} closed",
    "KeyError: 'sku-{}'",
    "TimeoutError: {} s",
    "OSError: disk {}",
    "X: y{}",
]
PER_GROUP = 200  # rows per group for most tests; the replay's proof has the 10,000 rows
FULL_SIZE = 2_000  # x 5 groups: the 10,000 failed rows
#: The error of the fixture's attempt rows: a smoke run's database holds other tests' attempts,
#: some under the same primary keys (a flush resets MariaDB's AUTO_INCREMENT).
FIXTURE_ATTEMPT = "dead-letter fixture"


def staff(name: str, *codenames: str, app_label: str = "testapp") -> Client:
    user = User.objects.create_user(name, is_staff=True)
    for codename in codenames:
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label=app_label, codename=codename)
        )
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def failed(request: pytest.FixtureRequest) -> int:
    """FAILED jobs in the five groups, ``PER_GROUP`` each (or the test's parameter); returns
    the number per group."""
    per_group = getattr(request, "param", PER_GROUP)
    rows = [
        Job(
            name=f"{g}-{n}",
            queue_state=QueueState.FAILED,
            queue_attempts=8,
            queue_last_error=f"Traceback\n{text.format(n)}\n",
        )
        for g, text in enumerate(GROUPS)
        for n in range(per_group)
    ]
    Job.objects.bulk_create(rows, batch_size=1000)
    attempts = [
        QueueAttempt(
            model="testapp.Job",
            object_id=str(job.pk),
            attempt=1,
            outcome="failed",
            error=FIXTURE_ATTEMPT,
            finished_at=job.queue_enqueued_at,
        )
        for job in Job.objects.order_by("pk")[per_group : per_group + 50]  # group 1's first rows
    ]
    QueueAttempt.objects.bulk_create(attempts)
    return per_group


def test_groups_are_listed_by_masked_error(failed) -> None:
    viewer = staff("viewer", "view_job")
    assert reverse(URL).encode() in viewer.get(reverse("admin:testapp_job_changelist")).content  # linked
    page = viewer.get(reverse(URL))
    assert page.status_code == 200
    counts = {g.text: g.count for g, _, _ in page.context["groups"]}
    assert counts["ValueError: account <n> closed"] == PER_GROUP and len(counts) == len(GROUPS)
    assert not page.context["can_replay"] and b"Replay these" not in page.content


# slow: the smoke runs of older Djangos and Pythons leave the 10,000-row build to the admin pass.
@pytest.mark.slow
@pytest.mark.parametrize("failed", [FULL_SIZE], indirect=True)
def test_one_group_is_replayed_in_one_statement_with_its_history(failed: int) -> None:
    history = QueueAttempt.objects.count()
    client = staff("editor", "view_job", "change_job")
    with CaptureQueriesContext(connection) as queries:
        client.post(reverse(URL), {"group": "KeyError: 'sku-<n>'", "count": failed})
    updates = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("UPDATE")]
    assert len(updates) == 1
    ready = Job.objects.filter(queue_state=QueueState.READY)
    assert ready.count() == failed and all(n.startswith("1-") for n in ready.values_list("name", flat=True))
    assert set(ready.values_list("queue_attempts", flat=True)) == {0}
    # The replayed rows keep their attempts (the fixture's 50), and no attempt row went or came.
    assert QueueAttempt.objects.count() == history
    replayed = [str(pk) for pk in ready.values_list("pk", flat=True)]
    ours = QueueAttempt.objects.filter(model="testapp.Job", object_id__in=replayed, error=FIXTURE_ATTEMPT)
    assert ours.count() == 50


def test_a_stale_count_replays_nothing(failed) -> None:
    client = staff("editor", "view_job", "change_job")
    client.post(reverse(URL), {"group": "OSError: disk <n>", "count": PER_GROUP - 1})
    assert not Job.objects.filter(queue_state=QueueState.READY).exists()


def test_a_forged_replay_without_change_permission_changes_nothing(failed) -> None:
    for client in (staff("viewer", "view_job"), staff("nobody")):
        response = client.post(reverse(URL), {"group": "OSError: disk <n>", "count": PER_GROUP})
        assert response.status_code == 403
    assert Job.objects.filter(queue_state=QueueState.FAILED).count() == PER_GROUP * len(GROUPS)


def test_the_page_and_its_replay_keep_to_the_changelists_filters(failed) -> None:
    """Linked from a filtered changelist, the page groups only the failed rows the filters
    select, and a replay changes only those, in one UPDATE; an invalid filter replays nothing."""
    Job.objects.filter(name__regex=r"-[0-9]*[02468]$").update(queue_priority=5)  # half of each group
    query = "queue_priority__range__gte=5"
    editor = staff("editor", "view_job", "change_job")
    changelist = editor.get(reverse("admin:testapp_job_changelist") + f"?{query}")
    assert f"{reverse(URL)}?{query}".encode() in changelist.content
    page = editor.get(f"{reverse(URL)}?{query}")
    assert {g.count for g, _, _ in page.context["groups"]} == {PER_GROUP // 2}
    assert page.context["filtered"] and b"dbqueue-dead-letters-filtered" in page.content
    with CaptureQueriesContext(connection) as queries:
        editor.post(f"{reverse(URL)}?{query}", {"group": "KeyError: 'sku-<n>'", "count": PER_GROUP // 2})
    assert len([q for q in queries.captured_queries if q["sql"].startswith("UPDATE")]) == 1
    ready = Job.objects.filter(queue_state=QueueState.READY)
    assert ready.count() == PER_GROUP // 2
    assert set(ready.values_list("queue_priority", flat=True)) == {5}
    assert {n.split("-")[0] for n in ready.values_list("name", flat=True)} == {"1"}
    # The whole group unfiltered now holds the other half only: the filter was the UPDATE's.
    assert Job.objects.filter(queue_state=QueueState.FAILED, name__startswith="1-").count() == PER_GROUP // 2
    bad = f"{reverse(URL)}?queue_priority__range__gte=many"
    assert editor.get(bad).context["filter_errors"]
    editor.post(bad, {"group": "OSError: disk <n>", "count": PER_GROUP})
    assert not Job.objects.filter(queue_state=QueueState.READY, name__startswith="3-").exists()


@pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks arrived in Django 6.0")
def test_a_task_is_replayed_with_edited_arguments_checked_as_enqueue_checks_them() -> None:
    record = TaskRecord.objects.create(
        task_path="tests.testapp.tasks.add", args=[1, 2], kwargs={}, queue_state=QueueState.FAILED,
        queue_last_error="TypeError: x",
    )  # fmt: skip
    url = reverse("admin:django_dbqueue_taskrecord_dbqueue_dead_letters")
    editor = staff("editor", "view_taskrecord", "change_taskrecord", app_label="django_dbqueue")
    assert b"Replay one row with its arguments edited" in editor.get(url).content
    for client, value in (
        (staff("viewer", "view_taskrecord", app_label="django_dbqueue"), '{"args": [3, 4]}'),
        (editor, '{"args": {"a": 1}}'),  # not a list
        (editor, '{"args": [1], "task_path": "os.system"}'),  # only the arguments are edited
        (editor, '{"args": ["nul \\u0000 byte"]}'),  # text no database stores
        (editor, "[3, 4]"),
    ):
        client.post(url, {"pk": record.pk, "value": value})
        record.refresh_from_db()
        assert (record.queue_state, record.args, record.task_path) == (
            QueueState.FAILED, [1, 2], "tests.testapp.tasks.add",
        )  # fmt: skip
    editor.post(url, {"pk": "no such row", "value": '{"args": [3, 4]}'})
    editor.post(url, {"pk": record.pk, "value": '{"args": [3, 4], "kwargs": {"scale": 2}}'})
    record.refresh_from_db()
    assert (record.queue_state, record.args, record.kwargs, record.queue_attempts) == (
        QueueState.READY, [3, 4], {"scale": 2}, 0,
    )  # fmt: skip


def test_a_message_is_replayed_with_an_edited_payload_checked_as_publish_checks_it() -> None:
    message = Message.objects.publish("test.echo", {"n": 1}).message
    Message.objects.filter(pk=message.pk).update(
        queue_state=QueueState.FAILED, queue_last_error="ValueError: n"
    )
    url = reverse("admin:django_dbqueue_message_dbqueue_dead_letters")
    editor = staff("editor", "view_message", "change_message", app_label="django_dbqueue")
    too_deep = json.dumps(functools.reduce(lambda inner, _: [inner], range(40), 1))
    for client, value in (
        (staff("viewer", "view_message", app_label="django_dbqueue"), '{"n": 2}'),
        (editor, too_deep),
    ):
        client.post(url, {"pk": message.pk, "value": value})
        message.refresh_from_db()
        assert (message.queue_state, message.payload) == (QueueState.FAILED, {"n": 1})
    editor.post(url, {"pk": message.pk, "value": '{"n": 2}'})
    message.refresh_from_db()
    assert (message.queue_state, message.payload, message.queue_attempts) == (QueueState.READY, {"n": 2}, 0)
