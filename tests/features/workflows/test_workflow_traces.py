"""A durable workflow's runs in the traces (issue #36): a span per step the run executes (a
child of its job span, none for a replayed step), and a parked run's job span says so."""

from __future__ import annotations

import pytest

from django_dbqueue.worker import Worker
from tests.features.observability.test_traces import spans  # noqa: F401 - the fixture
from tests.testapp.models import AtomicWorkflow

pytestmark = pytest.mark.django_db(transaction=True)


def test_each_step_has_a_span_under_its_run(spans) -> None:  # noqa: F811 - the fixture
    AtomicWorkflow.objects.create(steps=3)
    Worker(models=[AtomicWorkflow], burst=True, handle_signals=False).run()
    finished = spans.get_finished_spans()
    steps = [span for span in finished if span.name.startswith("step ")]
    runs = {span.context.span_id: span for span in finished if span.name == "process testapp.AtomicWorkflow"}
    # One span per step executed, each under the run that executed it (replays make none).
    assert sorted(span.name for span in steps) == ["step step-1", "step step-2", "step step-3"]
    assert all(span.parent is not None and span.parent.span_id in runs for span in steps)
    assert {span.attributes["dbqueue.step"] for span in steps} == {"step-1", "step-2", "step-3"}
    # Atomic mode: three runs, the first two parked (due at once), the last succeeded.
    outcomes = sorted(span.attributes["dbqueue.outcome"] for span in runs.values())
    assert outcomes == ["parked", "parked", "succeeded"]
