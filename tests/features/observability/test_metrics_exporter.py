"""The ``runqueue --metrics-port`` exporter is contained (issue 34, item 5): this host only by
default, an idle client blocks no scrape, and a token keeps out scrapes without it. Each test
drives a real ``runqueue`` process through real sockets."""

from __future__ import annotations

import base64
import socket
import urllib.error
import urllib.request

import pytest

from tests.conftest import wait_until
from tests.features.observability.test_metrics import LABEL, free_port, scrape

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]


def get(port: int, headers: dict[str, str] | None = None, timeout: float = 5) -> tuple[int, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def answering(port: int, **headers: str) -> bool:
    try:
        return get(port, headers)[0] in (200, 401)
    except OSError:
        return False


def start_exporter(start_worker, *args: str, extra_env: dict[str, str] | None = None):
    port = free_port()
    worker = start_worker(
        LABEL, "--poll-interval", "0.5", "--metrics-port", str(port), *args, extra_env=extra_env
    )
    assert wait_until(lambda: answering(port), timeout=60), worker.output
    return port, worker


def stop(worker) -> None:
    worker.signal(15)
    assert worker.wait(timeout=60) == 0, worker.output


def test_the_exporter_listens_on_loopback_only_by_default(start_worker) -> None:
    port, worker = start_exporter(start_worker)
    # All of 127.0.0.0/8 is this host: a socket bound to every interface (0.0.0.0) accepts a
    # connection to 127.0.0.2, one bound to 127.0.0.1 refuses it.
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.2", port), timeout=5).close()
    stop(worker)


def test_every_interface_only_when_asked(start_worker) -> None:
    port, worker = start_exporter(start_worker, "--metrics-address", "0.0.0.0")
    socket.create_connection(("127.0.0.2", port), timeout=5).close()
    stop(worker)


def test_an_idle_connection_blocks_no_scrape(start_worker) -> None:
    port, worker = start_exporter(start_worker)
    idle = socket.create_connection(("127.0.0.1", port), timeout=5)
    slow = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        slow.sendall(b"GET /metrics HTTP/1.1\r\n")  # half a request, never finished
        # Both connections stay open while another client scrapes, several times.
        for _ in range(3):
            status, text = get(port, timeout=5)
            assert status == 200 and "dbqueue_workers" in text
    finally:
        idle.close()
        slow.close()
    stop(worker)


def test_a_scrape_without_the_token_gets_401(start_worker) -> None:
    token = "s3cret-token"
    port, worker = start_exporter(start_worker, extra_env={"DBQUEUE_METRICS_TOKEN": token})
    status, text = get(port)
    assert status == 401 and "dbqueue_" not in text
    assert get(port, {"Authorization": "Bearer wrong"})[0] == 401
    assert get(port, {"Authorization": "Basic !!not-base64"})[0] == 401
    status, text = get(port, {"Authorization": f"Bearer {token}"})
    assert status == 200 and "dbqueue_workers" in text
    basic = base64.b64encode(f"prometheus:{token}".encode()).decode()
    assert get(port, {"Authorization": f"Basic {basic}"})[0] == 200
    assert scrape(port) is None  # the suite's own helper sends no token
    # The secret came from the environment: nothing on the command line shows it.
    assert token not in " ".join(worker.proc.args)
    stop(worker)
