"""Count the SQL statements a worker process sends (for the idle-worker scenario only).

Enabled by ``BENCH_COUNT_QUERIES=<dir>``: every Django connection gets an execute wrapper
that counts statements and, at most every 0.2 s, writes ``<count>`` to ``<dir>/<pid>``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from django.db.backends.signals import connection_created

_state = {"count": 0, "written": 0.0}


def _wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
    _state["count"] += 1
    now = time.monotonic()
    if now - _state["written"] > 0.2:
        _state["written"] = now
        target = Path(os.environ["BENCH_COUNT_QUERIES"], str(os.getpid()))
        partial = target.with_suffix(".tmp")
        partial.write_text(str(_state["count"]))
        partial.replace(target)  # atomic: the driver never reads a half-written file
    return execute(sql, params, many, context)


def _on_connection(sender: Any, connection: Any, **kwargs: Any) -> None:
    if _wrapper not in connection.execute_wrappers:
        connection.execute_wrappers.append(_wrapper)


def install() -> None:
    if os.environ.get("BENCH_COUNT_QUERIES"):
        connection_created.connect(_on_connection, dispatch_uid="bench.querycount")
