"""``runqueue``'s start-up: a stop signal while Django starts is a clean stop, and the worker
does not import what it does not use (issue #31, item 6). The start-up time itself is
measured by ``bench/startup.py`` (``make bench-startup``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from django_dbqueue.states import QueueState
from tests.conftest import wait_until
from tests.testapp.models import Job

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("inherited", ["default", "ignored"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_stop_signal_while_django_starts_is_a_clean_stop(tmp_path, sig, inherited) -> None:
    """The signal arrives in the middle of ``django.setup()`` (an app's ``ready()`` holds it
    there until the test lets it go): not death by -15, but exit code 0, no worker started.
    "ignored": started as a shell's background job is, with SIGINT ignored (the whole suite
    run in the background did that, and this SIGINT went unheard while the worker started)."""
    Job.objects.create(name="waiting")
    connection.close()
    env = {
        **os.environ,
        "DBQUEUE_TEST_DB_NAME": str(connection.settings_dict["NAME"]),
        "DBQUEUE_TEST_START_GATE": str(tmp_path),
        "DBQUEUE_LOG_LEVEL": "INFO",
    }
    command = ["runqueue", "--settings", "tests.settings_slow_start", "testapp.Job"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "django", *command],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=_ignore_sigint if inherited == "ignored" else None,
    )
    try:
        assert wait_until(lambda: (tmp_path / "starting").exists() or proc.poll() is not None, timeout=60)
        proc.send_signal(sig)
        (tmp_path / "go").touch()
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, out
    assert "no worker started" in out and "consuming" not in out, out
    assert Job.objects.get().queue_state == QueueState.READY


def test_the_first_signal_right_after_launch_is_a_clean_stop(start_worker) -> None:
    """The issue's trial: SIGTERM 0.2 s after launch. Whether Django has reached the package
    by then depends on the machine: what must never happen is death by the signal."""
    import time

    worker = start_worker("testapp.Job")
    time.sleep(0.2)
    worker.signal(signal.SIGTERM)
    code = worker.wait(timeout=60)
    if code == -signal.SIGTERM:
        # Still inside Python's or Django's own imports, before any code of this package
        # ran: nothing any package could catch. Measured on an idle machine it is not.
        pytest.skip("the signal arrived before Django imported django_dbqueue (a loaded machine)")
    assert code == 0, worker.output


def test_importing_the_models_imports_no_optional_library() -> None:
    """Prometheus, OpenTelemetry, Spark and tqdm are imported where they are used (the
    exporter, a configured tracer, the Spark helpers, the progress bar), not by every worker."""
    code = (
        "import django, sys\n"
        "django.setup()\n"
        "import django_dbqueue.models, django_dbqueue.worker.loop\n"
        "heavy = ('prometheus_client', 'opentelemetry', 'pyspark', 'tqdm')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    env.pop("OTEL_PYTHON_TRACER_PROVIDER", None)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout


def test_tracing_still_works_once_a_provider_is_configured() -> None:
    """Not importing OpenTelemetry up front must not lose the spans of a process that sets a
    tracer provider after django_dbqueue was imported."""
    pytest.importorskip("opentelemetry.sdk")
    code = (
        "import django\n"
        "django.setup()\n"
        "from django_dbqueue.observability import traces\n"
        "assert not traces.active()\n"
        "from opentelemetry import trace\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "trace.set_tracer_provider(TracerProvider())\n"
        "assert traces.active()\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True)
