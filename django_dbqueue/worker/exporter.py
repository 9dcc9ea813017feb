"""``runqueue --metrics-port``: one process that serves ``/metrics`` for all the workers.

The workers are forked children of the supervisor (``--concurrency N``), so their counters
live in N processes. Each writes them to ``PROMETHEUS_MULTIPROC_DIR`` (prometheus_client's
multiprocess mode) and this exporter sums the files on each scrape, with the database's gauges
(:class:`~django_dbqueue.metrics.QueueCollector`).

It is a forked process of its own rather than a thread of the supervisor: a process that
has threads should not fork (the supervisor forks a new worker whenever one dies). The port
is bound before the fork, so a port in use is an error of the command, not of a child.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import tempfile
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from .. import metrics

logger = logging.getLogger("django_dbqueue.metrics")


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("metrics: " + format, *args)


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
        self, port: int, address: str = "0.0.0.0", models: Any = None, database: str | None = None
    ) -> None:
        from prometheus_client import make_wsgi_app

        scrape = _Scrape(metrics.QueueCollector(models, database))
        try:
            self.server = make_server(address, port, make_wsgi_app(scrape), handler_class=_Quiet)
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
