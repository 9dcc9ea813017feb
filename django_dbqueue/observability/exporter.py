"""``runqueue --metrics-port``: one process that serves ``/metrics`` for all the workers.

The workers are forked children of the supervisor (``--concurrency N``), so their counters
live in N processes. Each writes them to ``PROMETHEUS_MULTIPROC_DIR`` (prometheus_client's
multiprocess mode) and this exporter sums the files on each scrape, with the database's gauges
(:class:`~django_dbqueue.observability.metrics.QueueCollector`).

It is a forked process of its own rather than a thread of the supervisor: a process that
has threads should not fork (the supervisor forks a new worker whenever one dies). The port
is bound before the fork, so a port in use is an error of the command, not of a child.

Containment (issue 34): it listens on 127.0.0.1 unless ``--metrics-address`` names another
address; each connection is served by a thread of its own (in the forked child, which never
forks again) and is dropped after :data:`CONNECTION_TIMEOUT` seconds of silence, so an idle or
slow client delays no scrape; and with ``DBQUEUE_METRICS_TOKEN`` in the environment every
request must carry that token (``Authorization: Bearer <token>``, or HTTP basic auth with the
token as the password), else it gets 401. The token is read from the environment, never from
the command line, where ``ps`` would show it to every user of the host.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
import os
import signal
import sys
import tempfile
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from . import metrics

logger = logging.getLogger("django_dbqueue.metrics")

#: Where ``--metrics-port`` listens unless ``--metrics-address`` says otherwise: this host only.
DEFAULT_ADDRESS = "127.0.0.1"
#: The environment variable holding the token a scrape must present (unset: none is asked).
TOKEN_VARIABLE = "DBQUEUE_METRICS_TOKEN"
#: Seconds a connection may stay silent (no request, a request sent slowly) before it is closed.
CONNECTION_TIMEOUT = 10.0


class _Quiet(WSGIRequestHandler):
    # A socket timeout per connection: a client that connects and sends nothing holds one
    # thread for this long, not the server.
    timeout = CONNECTION_TIMEOUT

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("metrics: " + format, *args)


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    """One thread per connection, so a scrape never waits behind another client."""

    daemon_threads = True  # a connection in progress does not keep the exporter alive at stop


WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def presented_token(authorization: str) -> str | None:
    """The token an ``Authorization`` header carries: a bearer token, or basic auth's password
    (Prometheus's ``basic_auth`` with any user name); None if it carries neither."""
    scheme, _, value = authorization.strip().partition(" ")
    if scheme.lower() == "bearer":
        return value.strip()
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return None
        return decoded.partition(":")[2]
    return None


def require_token(app: WSGIApp, token: str) -> WSGIApp:
    """``app`` behind ``token``: 401 (with nothing of the metrics) for a request without it."""
    expected = token.encode()

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        given = presented_token(environ.get("HTTP_AUTHORIZATION", ""))
        if given is not None and hmac.compare_digest(given.encode(), expected):
            return app(environ, start_response)
        start_response(
            "401 Unauthorized",
            [("Content-Type", "text/plain; charset=utf-8"), ("WWW-Authenticate", 'Bearer realm="metrics"')],
        )
        return [b"a token is required: Authorization: Bearer <DBQUEUE_METRICS_TOKEN>\n"]

    return guarded


def prepare_multiprocess() -> str | None:
    """Make sure every worker process writes its metrics where the exporter reads them; return
    the directory made for this run (to remove at the end), None if the environment named one."""
    if not metrics.available():
        raise ImproperlyConfigured(
            "--metrics-port needs prometheus_client: pip install 'django-dbqueue[metrics]'"
        )
    if metrics.multiprocess():
        return None
    if "prometheus_client" in sys.modules:
        # It chose where values live when it was imported (in memory, before this command
        # could name a directory): the worker processes' numbers would never be summed.
        raise ImproperlyConfigured(
            "prometheus_client was imported before runqueue could choose its multiprocess mode: "
            "set PROMETHEUS_MULTIPROC_DIR to an empty directory in this command's environment"
        )
    made = tempfile.mkdtemp(prefix="dbqueue-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = made
    return made


class Exporter:
    """The forked metrics server; ``stop()`` ends it."""

    def __init__(
        self, port: int, address: str = DEFAULT_ADDRESS, models: Any = None, database: str | None = None
    ) -> None:
        from prometheus_client import make_wsgi_app

        scrape = _Scrape(metrics.QueueCollector(models, database))
        app: WSGIApp = make_wsgi_app(scrape)
        token = os.environ.get(TOKEN_VARIABLE, "")
        if token:
            app = require_token(app, token)
        try:
            self.server = make_server(address, port, app, server_class=_ThreadingServer, handler_class=_Quiet)
        except OSError as exc:
            raise ImproperlyConfigured(f"--metrics-port {port}: cannot listen on {address}: {exc}") from exc
        self.port = self.server.server_port
        self.pid = 0

    def start(self) -> None:
        connections.close_all()  # a forked child must not share the parent's sockets
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the supervisor's
            code = 0
            try:
                self.server.timeout = 1.0
                while os.getppid() == parent:  # the supervisor is gone (SIGKILL): so are we
                    self.server.handle_request()
            except BaseException:
                logger.exception("metrics exporter crashed")
                code = 1
            finally:
                os._exit(code)
        self.pid = pid
        self.server.server_close()
        logger.info("metrics on port %d (process %d)", self.port, pid)

    def stop(self) -> None:
        if not self.pid:
            return
        try:
            os.kill(self.pid, signal.SIGTERM)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        self.pid = 0


class _Scrape:
    """What each scrape reads: built per scrape, so the files of workers started since count."""

    def __init__(self, collector: metrics.QueueCollector) -> None:
        self.collector = collector  # the gauges of the models this runqueue consumes

    def collect(self) -> Any:
        try:
            yield from metrics.registry(self.collector).collect()
        finally:
            connections.close_all()  # no session is held between scrapes
