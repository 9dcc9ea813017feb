"""OpenTelemetry: a request that enqueues and the worker's run of the job are one trace.

The SDK's in-memory exporter records the spans; a middleware plays the part of the
instrumentation of Django (a SERVER span per request). The tracer provider is global and set
once per process, so it is set here for the rest of the session; ``traces.active()`` is
checked before and after.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import django
import pytest
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.urls import path
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import django_dbqueue
from django_dbqueue.models import Message
from django_dbqueue.observability import traces
from django_dbqueue.worker import Worker
from tests.testapp.models import Job

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[3]
EXPORTER = InMemorySpanExporter()
RAN: list[int] = []


def traced_request(get_response):
    def middleware(request: HttpRequest) -> HttpResponse:
        tracer = trace.get_tracer("test.django")
        with tracer.start_as_current_span(f"{request.method} {request.path}", kind=trace.SpanKind.SERVER):
            return get_response(request)

    return middleware


def enqueue_view(request: HttpRequest) -> HttpResponse:
    published = Message.objects.publish("obs.trace", {"n": int(request.GET.get("n", "1"))})
    assert published is not None
    return HttpResponse(str(published.message.pk))


def fail_view(request: HttpRequest) -> HttpResponse:
    Message.objects.publish("obs.fail", {})
    return HttpResponse("ok")


urlpatterns = [path("enqueue/", enqueue_view), path("fail/", fail_view)]


@pytest.fixture
def spans(settings) -> Iterator[InMemorySpanExporter]:
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(provider)
    settings.ROOT_URLCONF = "tests.features.observability.test_traces"
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "tests.features.observability.test_traces.traced_request"]
    EXPORTER.clear()

    @django_dbqueue.handler("obs.trace")
    def run(message: Message) -> None:
        RAN.append(message.payload["n"])

    @django_dbqueue.handler("obs.fail")
    def fail(message: Message) -> None:
        raise RuntimeError("planned")

    yield EXPORTER
    from django_dbqueue.messaging.handlers import unregister

    unregister("obs.trace")
    unregister("obs.fail")


def drain(model: type) -> None:
    Worker(models=[model], burst=True, handle_signals=False).run()


def test_the_request_and_the_job_are_one_trace(client: Client, spans: InMemorySpanExporter) -> None:
    assert traces.active()
    response = client.get("/enqueue/?n=7")
    pk = int(response.content)
    assert Message.objects.get(pk=pk).queue_trace.startswith("traceparent:00-")
    drain(Message)
    assert RAN[-1] == 7
    by_name = {span.name: span for span in spans.get_finished_spans()}
    request = by_name["GET /enqueue/"]
    enqueue = by_name["enqueue django_dbqueue.Message"]
    job = by_name["process django_dbqueue.Message"]
    claim = by_name["claim django_dbqueue.Message"]
    trace_id = request.context.trace_id
    assert enqueue.context.trace_id == trace_id and enqueue.parent.span_id == request.context.span_id
    assert job.context.trace_id == trace_id and job.parent.span_id == enqueue.context.span_id
    assert enqueue.kind == trace.SpanKind.PRODUCER and job.kind == trace.SpanKind.CONSUMER
    assert job.attributes["dbqueue.model"] == "django_dbqueue.Message"
    assert job.attributes["dbqueue.queue"] == "default"
    assert job.attributes["dbqueue.attempt"] == 1
    assert job.attributes["dbqueue.outcome"] == "succeeded"
    assert claim.attributes["messaging.batch.message_count"] == 1
    assert claim.context.trace_id != trace_id  # the worker's own work, not the request's


def test_a_failed_job_span_has_its_error(client: Client, spans: InMemorySpanExporter) -> None:
    client.get("/fail/")
    drain(Message)
    job = next(s for s in spans.get_finished_spans() if s.name == "process django_dbqueue.Message")
    assert job.attributes["dbqueue.outcome"] == "failed"
    assert job.status.status_code == trace.StatusCode.ERROR
    assert any(event.name == "exception" for event in job.events)


def test_bulk_enqueue_paths_share_one_enqueue_span(spans: InMemorySpanExporter) -> None:
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("batch job") as outer:
        Message.objects.publish_many([{"kind": "obs.trace", "payload": {"n": i}} for i in range(3)])
        Message.objects.filter(kind="nothing").enqueue()  # an UPDATE of no rows still traced
    contexts = set(Message.objects.values_list("queue_trace", flat=True))
    assert len(contexts) == 1
    enqueue = next(s for s in spans.get_finished_spans() if s.attributes.get("messaging.batch.message_count"))
    assert enqueue.parent.span_id == outer.get_span_context().span_id
    drain(Message)
    jobs = [s for s in spans.get_finished_spans() if s.name == "process django_dbqueue.Message"]
    assert len(jobs) == 3 and {s.parent.span_id for s in jobs} == {enqueue.context.span_id}


def test_a_model_without_the_column_runs_untraced_by_its_enqueue(spans: InMemorySpanExporter) -> None:
    Job.objects.create(name="plain")
    drain(Job)
    job = next(s for s in spans.get_finished_spans() if s.name == "process testapp.Job")
    assert job.parent is None  # a root span: nothing stored to continue
    assert not traces.traced(Job) and traces.traced(Message)


@pytest.mark.parametrize(
    ("setup", "installed"),
    [("", True), ("import sys; sys.modules['opentelemetry'] = None", False)],
    ids=["no-provider", "not-installed"],
)
def test_nothing_is_traced_without_a_provider_or_the_library(setup: str, installed: bool) -> None:
    code = (
        f"{setup}\nfrom django_dbqueue.observability import traces\n"
        f"assert traces.installed() is {installed} and not traces.active()\n"
        "assert traces.enqueue_context(None) is None\n"
        "with traces.claim_span(None, 'w') as taken: taken[0] = 1\n"
        "with traces.job_span(None) as span: assert span is None\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


@pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks is Django 6's")
def test_a_task_runs_in_the_trace_that_enqueued_it(spans: InMemorySpanExporter) -> None:
    from django_dbqueue.models import TaskRecord
    from tests.testapp import tasks

    with trace.get_tracer("test").start_as_current_span("request") as request:
        result = tasks.add.enqueue(2, 3)
    drain(TaskRecord)
    result.refresh()
    assert result.return_value == 5
    job = next(s for s in spans.get_finished_spans() if s.name == "process django_dbqueue.TaskRecord")
    assert job.context.trace_id == request.get_span_context().trace_id
    assert job.attributes["dbqueue.queue"] == "default"


def test_whether_spans_go_anywhere_is_asked_once_per_claim(monkeypatch) -> None:
    """``traces.active()`` reads the environment: a claim's handlers ask it once, not per job
    (with no tracer provider, as here, nothing else asks it for a job)."""
    Job.objects.bulk_create([Job(name=str(i)) for i in range(20)])
    asked = []

    def counted() -> bool:
        asked.append(1)
        return False

    monkeypatch.setattr(traces, "active", counted)
    stats = Worker(models=[Job], burst=True, batch_size=20, handle_signals=False).run()
    assert stats.succeeded == 20
    assert len(asked) < 20 / 2, asked
