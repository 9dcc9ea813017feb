"""Prometheus metrics: a real ``runqueue --concurrency 2 --metrics-port`` scraped during and
after a drain, its counters against the ledger; the Django view; bad arguments."""

from __future__ import annotations

import socket
import urllib.request
from collections import defaultdict

import pytest
from django.core.management import CommandError, call_command
from django.db.models import Count
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from django_dbqueue import signals
from django_dbqueue.states import QueueState
from django_dbqueue.worker import Worker
from tests.conftest import wait_until
from tests.testapp.models import AtomicJob, GroupedAtomicJob, Job, Ledger

pytestmark = pytest.mark.django_db(transaction=True)

LABEL = "testapp.Job"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def parse(text: str) -> dict[str, float]:
    """Sample name (and model label) -> value, summed over the other labels."""
    found: dict[str, float] = defaultdict(float)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            model = sample.labels.get("model")
            key = sample.name if model is None else f"{sample.name}[{model}]"
            if "le" not in sample.labels:
                found[key] += sample.value
    return found


def scrape(port: int) -> dict[str, float] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            return parse(response.read().decode())
    except OSError:
        return None


@pytest.mark.processes
def test_metrics_of_two_worker_processes_match_the_ledger(start_worker) -> None:
    Job.objects.bulk_create(
        [Job(name=f"ok{i}", sleep=0.01) for i in range(300)]
        + [Job(name=f"retried{i}", fail_times=1) for i in range(30)]
        + [Job(name=f"dead{i}", fail_times=9) for i in range(10)]  # 3 attempts, then FAILED
    )
    port = free_port()
    worker = start_worker(
        LABEL,
        "--concurrency",
        "2",
        "--batch-size",
        "10",
        "--poll-interval",
        "0.05",
        "--metrics-port",
        str(port),
    )
    # During the drain: the exporter answers, with the two processes' work so far.
    assert wait_until(
        lambda: (scrape(port) or {}).get(f"dbqueue_jobs_succeeded_total[{LABEL}]", 0) > 0, 60
    ), worker.proc.poll()
    during = scrape(port)
    assert during is not None
    assert during[f"dbqueue_jobs_claimed_total[{LABEL}]"] <= 340 + 30 + 20

    def drained() -> bool:
        return not Job.objects.filter(queue_state__in=[QueueState.READY, QueueState.RUNNING]).exists()

    assert wait_until(drained, timeout=120)
    states = dict(Job.objects.values_list("queue_state").annotate(n=Count("pk")))
    assert states == {"succeeded": 330, "failed": 10}
    runs = Ledger.objects.filter(kind="Job").count()
    assert runs == 300 + 30 * 2 + 10 * 3
    # The last outcomes reach the files right after their commit: wait for them.
    assert wait_until(
        lambda: (scrape(port) or {}).get(f"dbqueue_jobs_succeeded_total[{LABEL}]") == 330, timeout=10
    )
    after = scrape(port)
    assert after is not None
    assert after[f"dbqueue_jobs_succeeded_total[{LABEL}]"] == 330
    assert after[f"dbqueue_jobs_failed_total[{LABEL}]"] == 10
    assert after[f"dbqueue_jobs_retried_total[{LABEL}]"] == 30 + 10 * 2
    assert after[f"dbqueue_jobs_claimed_total[{LABEL}]"] == runs
    assert after[f"dbqueue_job_duration_seconds_count[{LABEL}]"] == runs
    assert after[f"dbqueue_job_pickup_latency_seconds_count[{LABEL}]"] == runs
    assert after[f"dbqueue_job_duration_seconds_sum[{LABEL}]"] >= 300 * 0.01
    assert after.get(f"dbqueue_jobs_rejected_late_total[{LABEL}]", 0) == 0
    # Read from the database at scrape time.
    assert after[f"dbqueue_queue_depth[{LABEL}]"] == 0
    assert after["dbqueue_workers"] == 2
    worker.signal(15)
    assert worker.wait(timeout=60) == 0, worker.output
    assert scrape(port) is None  # the exporter stopped with the workers


def test_the_view_reports_depth_and_oldest_age(client: Client, settings) -> None:
    settings.ROOT_URLCONF = "tests.urls_observability"
    Job.objects.bulk_create([Job(name=str(i)) for i in range(7)])
    Job.objects.create(name="later", queue_state=QueueState.IDLE)
    response = client.get("/metrics/")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    found = parse(response.content.decode())
    assert found[f"dbqueue_queue_depth[{LABEL}]"] == 7
    assert found[f"dbqueue_oldest_ready_age_seconds[{LABEL}]"] >= 0
    assert found["dbqueue_workers"] == 0


def test_signals_are_counted_in_process() -> None:
    before = sample("dbqueue_jobs_succeeded_total")
    Job.objects.create(name="one")
    Worker(models=[Job], burst=True, handle_signals=False).run()  # in this process
    assert sample("dbqueue_jobs_succeeded_total") == before + 1


@pytest.mark.parametrize("model", [Job, AtomicJob, GroupedAtomicJob])
def test_a_flush_of_successes_is_counted_at_once_without_a_signal_per_row(model: type[Job]) -> None:
    """The success counter takes a write's rows at once (``queue.extensions.succeeded``): a
    model nobody else listens to sends no ``job_succeeded`` per row, and every success counts,
    in every mode (atomic mode records a job's success by a path of its own)."""
    assert not signals.job_succeeded.has_listeners(model)
    before = sample("dbqueue_jobs_succeeded_total", model._meta.label)
    model.objects.bulk_create([model(name=str(i)) for i in range(25)])
    Worker(models=[model], burst=True, batch_size=25, handle_signals=False).run()
    assert sample("dbqueue_jobs_succeeded_total", model._meta.label) == before + 25


@pytest.mark.parametrize("value", ["0", "65536", "http"])
def test_a_bad_metrics_port_is_refused(value: str) -> None:
    with pytest.raises(CommandError, match="metrics-port"):
        call_command("runqueue", LABEL, "--burst", "--metrics-port", value)
    assert not Ledger.objects.exists()


def test_a_port_in_use_is_a_command_error(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(CommandError, match="cannot listen"):
            call_command(
                "runqueue", LABEL, "--burst", "--metrics-port", str(port), "--metrics-address", "127.0.0.1"
            )


def sample(name: str, label: str = LABEL) -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value(name, {"model": label, "queue": ""}) or 0.0


def test_rescued_and_rejected_late_outcomes_are_counted() -> None:
    from datetime import timedelta

    from django.utils import timezone

    from django_dbqueue.exceptions import LeaseLost

    rescued, rejected = sample("dbqueue_jobs_rescued_total"), sample("dbqueue_jobs_rejected_late_total")
    Job.objects.create(name="lost")
    [first] = Job.objects.claim(1, "w1", lease=60)
    Job.objects.filter(pk=first.pk).update(queue_locked_until=timezone.now() - timedelta(seconds=1))
    assert Job.objects.rescue_expired() == 1
    assert sample("dbqueue_jobs_rescued_total") == rescued + 1
    [second] = Job.objects.claim(1, "w2", lease=60)
    assert second.pk == first.pk
    with pytest.raises(LeaseLost):
        first.mark_succeeded()  # its claim is gone: rejected, not written
    assert sample("dbqueue_jobs_rejected_late_total") == rejected + 1
    second.mark_succeeded()
    assert Job.objects.get().queue_state == QueueState.SUCCEEDED


def test_workflow_steps_are_timed_and_counted_by_name_and_outcome() -> None:
    from prometheus_client import REGISTRY

    from tests.testapp.models import LeaseWorkflow

    label = LeaseWorkflow._meta.label

    def step(name: str, what: str, **more: str) -> float:
        labels = {"model": label, "queue": "", "step": name, **more}
        return REGISTRY.get_sample_value(f"dbqueue_workflow_step{what}", labels) or 0.0

    before = {
        (name, outcome): step(name, "s_total", outcome=outcome)
        for name in ("step-1", "step-2")
        for outcome in ("succeeded", "failed")
    }
    timed = step("step-2", "_duration_seconds_count")
    row = LeaseWorkflow.objects.create(steps=2, fail_step=2)  # step 2 raises on the first attempt
    Worker(models=[LeaseWorkflow], burst=True, handle_signals=False).run()
    # The retry, due now rather than after its 50 ms backoff (no wall time in the test).
    LeaseWorkflow.objects.filter(pk=row.pk).update(
        queue_run_at=LeaseWorkflow.objects.get(pk=row.pk).queue_enqueued_at
    )
    Worker(models=[LeaseWorkflow], burst=True, handle_signals=False).run()  # the retry
    assert LeaseWorkflow.objects.get(pk=row.pk).queue_state == QueueState.SUCCEEDED
    # Step 1 ran once (its checkpoint kept it from the retry); step 2 failed, then succeeded.
    assert step("step-1", "s_total", outcome="succeeded") == before[("step-1", "succeeded")] + 1
    assert step("step-2", "s_total", outcome="failed") == before[("step-2", "failed")] + 1
    assert step("step-2", "s_total", outcome="succeeded") == before[("step-2", "succeeded")] + 1
    assert step("step-2", "_duration_seconds_count") == timed + 2
