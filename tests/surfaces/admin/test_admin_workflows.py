"""A workflow row's admin page (issue #36): its progress and step timeline; "Fork from a
step…" forgets the checkpoints from that step on and queues the row again; the button and its
POST need the change permission (a forged POST is refused), and a bad step changes nothing."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from django_dbqueue.worker import Worker
from django_dbqueue.workflows import steps_of
from tests.surfaces.admin.test_admin import staff
from tests.testapp.models import AtomicWorkflow, Ticket

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def finished() -> AtomicWorkflow:
    row = AtomicWorkflow.objects.create(steps=3)
    Worker(models=[AtomicWorkflow], burst=True, handle_signals=False).run()
    row.refresh_from_db()
    assert row.queue_state == "succeeded"
    return row


def change_url(pk: int) -> str:
    return reverse("admin:testapp_atomicworkflow_change", args=[pk])


def fork_url(pk: int) -> str:
    return reverse("admin:testapp_atomicworkflow_dbqueue_row", args=[pk, "fork"])


def test_the_change_page_shows_the_timeline_progress_and_fork_button(
    admin_client: Client, finished: AtomicWorkflow
) -> None:
    page = admin_client.get(change_url(finished.pk)).content.decode()
    assert 'class="dbqueue-workflow"' in page
    for name in ("step-1", "step-2", "step-3"):
        assert name in page
    assert "100%: step 3 of 3" in page
    assert 'id="dbqueue-row-fork"' in page


def test_the_changelist_shows_each_rows_progress_in_one_query(
    admin_client: Client, finished: AtomicWorkflow
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    fresh = AtomicWorkflow.objects.create(steps=2)  # no run yet: no progress
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(reverse("admin:testapp_atomicworkflow_changelist"))
    page = response.content.decode()
    assert response.status_code == 200
    assert "column-dbqueue_progress" in page
    assert '<progress max="100" value="100"></progress> 100%' in page and "step 3 of 3" in page
    cells = re.findall(r'<td class="field-dbqueue_progress">(.*?)</td>', page, re.S)
    # The list is newest first: the fresh row (no run, no progress), then the finished one.
    assert len(cells) == 2 and cells[0] == "-" and "step 3 of 3" in cells[1], (fresh.pk, cells)
    progress_reads = [q["sql"] for q in queries.captured_queries if "workflowprogress" in q["sql"]]
    assert len(progress_reads) == 1, progress_reads


def test_a_model_that_is_not_a_workflow_has_no_progress_column(admin_client: Client) -> None:
    Ticket.objects.create(subject="s", customer=1)
    page = admin_client.get(reverse("admin:testapp_ticket_changelist")).content.decode()
    assert "column-dbqueue_progress" not in page


def test_fork_asks_for_the_step_then_forks_from_it(admin_client: Client, finished: AtomicWorkflow) -> None:
    form = admin_client.post(fork_url(finished.pk))
    assert form.status_code == 200 and "2. step-2" in form.content.decode()
    done = admin_client.post(fork_url(finished.pk), {"dbqueue_apply": "1", "position": "2"})
    assert done.status_code == 302
    finished.refresh_from_db()
    assert finished.queue_state == "ready"
    assert [step.name for step in steps_of(finished)] == ["step-1"]


def test_a_bad_step_changes_nothing(admin_client: Client, finished: AtomicWorkflow) -> None:
    for position in ("9", "x", ""):
        form = admin_client.post(fork_url(finished.pk), {"dbqueue_apply": "1", "position": position})
        assert form.status_code == 200  # the form again, with its error
    finished.refresh_from_db()
    assert finished.queue_state == "succeeded"
    assert steps_of(finished).count() == 3


def test_a_forged_fork_without_the_change_permission_is_refused(finished: AtomicWorkflow) -> None:
    viewer = staff("viewer", "view_atomicworkflow")
    assert 'id="dbqueue-row-fork"' not in viewer.get(change_url(finished.pk)).content.decode()
    forged = viewer.post(fork_url(finished.pk), {"dbqueue_apply": "1", "position": "1"})
    assert forged.status_code == 403
    assert viewer.get(fork_url(finished.pk)).status_code in (403, 405)
    finished.refresh_from_db()
    assert finished.queue_state == "succeeded"
    assert steps_of(finished).count() == 3


def test_no_fork_on_a_model_that_is_not_a_workflow(admin_client: Client) -> None:
    ticket = Ticket.objects.create(subject="s", customer=1)
    url = reverse("admin:testapp_ticket_dbqueue_row", args=[ticket.pk, "fork"])
    assert admin_client.post(url, {"dbqueue_apply": "1", "position": "1"}).status_code == 404
    assert (
        'id="dbqueue-row-fork"'
        not in admin_client.get(reverse("admin:testapp_ticket_change", args=[ticket.pk])).content.decode()
    )


def test_the_dashboard_counts_rows_asleep_and_rows_waiting(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django_dbqueue.admin import stats

    AtomicWorkflow.objects.create(steps=2, nap=600)
    AtomicWorkflow.objects.bulk_create([AtomicWorkflow(steps=2, event="paid") for _ in range(2)])
    Worker(models=[AtomicWorkflow], burst=True, handle_signals=False).run()
    page = admin_client.get(reverse("admin:testapp_atomicworkflow_dbqueue_dashboard")).content.decode()
    assert re.search(r'id="dbqueue-workflows-sleeping">\s*1\s*<', page)
    assert re.search(r'id="dbqueue-workflows-waiting">\s*2\s*<', page)
    # A count stops at the limit and says so, rather than showing the limit plus one.
    monkeypatch.setattr(stats, "EXACT_LIMIT", 1)
    page = admin_client.get(reverse("admin:testapp_atomicworkflow_dbqueue_dashboard")).content.decode()
    assert re.search(r'id="dbqueue-workflows-sleeping">\s*1\s*<', page)
    assert re.search(r'id="dbqueue-workflows-waiting">\s*&gt; 1\s*<', page)
    ticket_page = admin_client.get(reverse("admin:testapp_ticket_dbqueue_dashboard")).content.decode()
    assert "dbqueue-workflows-sleeping" not in ticket_page  # not a workflow model
