"""Count the statements a worker process sends to the database server, at the driver.

Enabled by ``BENCH_COUNT_STATEMENTS=<dir>`` (bench/procs.py sets it for every drain's worker
command): :func:`install` wraps mysqlclient's ``Connection`` so that every round trip that is a
statement for the server counts one: ``query()`` (every cursor ``execute()``, and one per
multi-row ``executemany()``), ``commit()``, ``rollback()`` and ``autocommit()`` when it changes
the mode (mysqlclient sends ``SET autocommit`` then and only then). Each is counted under its
kind (the statement's first word, ``COMMIT``, ``ROLLBACK``, ``SET autocommit``), so the report
can say which statements a job costs. A thread of each process writes its counts to
``<dir>/<pid>`` (JSON) every :data:`WRITE_EVERY` seconds; the driver adds up the files of the
worker command's processes (:func:`total`, :func:`kinds`).

Why at the driver, not elsewhere:

* the server's ``Questions`` / ``Com_%`` counters are server-wide, and the benchmark's server
  is shared (other suites send ~1,000 statements per second to it), so their deltas over a
  drain are mostly someone else's; per-thread counters need performance_schema, which is off
  and needs a restart;
* Django's ``connection.execute_wrapper`` sees only cursor statements: not ``COMMIT``, the
  ``SET autocommit`` of every ``atomic()`` block, or the raw-SQL loops and peers' processes
  outside Django's cursor;
* every system under test (ours, the peers, the raw-SQL loops) talks to MariaDB through
  mysqlclient, so one counter counts all of them the same way.

The ledger's own connections (bench/ledger.py) are not counted: they are the benchmark's, not
the queue's, and cost every system the same.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

ENV = "BENCH_COUNT_STATEMENTS"
#: Seconds between two writes of a process's count (the driver samples as often).
WRITE_EVERY = 0.05

_state: dict[str, Any] = {"pid": 0, "count": 0, "kinds": {}}
#: Worker threads (dj_queue's, the ledger's) send statements side by side: ``+=`` is not atomic.
_lock = threading.Lock()


def kind_of(sql: bytes | str) -> str:
    """A statement's kind: its first word, upper case (``SELECT``, ``UPDATE``, ``SAVEPOINT``…)."""
    head = sql[:40].decode(errors="replace") if isinstance(sql, bytes | bytearray) else sql[:40]
    words = head.split(None, 1)
    return words[0].upper() if words else "?"


def _counted(connection: Any, kind: str) -> None:
    if getattr(connection, "bench_uncounted", False):
        return
    with _lock:
        if _state["pid"] != os.getpid():  # first statement of this process (or of a forked child)
            _state["pid"], _state["count"], _state["kinds"] = os.getpid(), 0, {}
            threading.Thread(target=_write_loop, args=(Path(os.environ[ENV]),), daemon=True).start()
        _state["count"] += 1
        _state["kinds"][kind] = _state["kinds"].get(kind, 0) + 1


def _write_loop(directory: Path) -> None:
    pid, written = os.getpid(), -1
    event = threading.Event()
    while not event.wait(WRITE_EVERY):
        if _state["pid"] != pid:  # forked: the child's thread writes the child's file
            return
        if _state["count"] != written:
            with _lock:
                written, counts = _state["count"], dict(_state["kinds"])
            write_counts(directory, pid, counts)


def write_counts(directory: Path, pid: int, counts: dict[str, int]) -> None:
    """``counts`` (by kind) into ``<directory>/<pid>``, atomically: the driver never reads half
    a file."""
    target = directory / str(pid)
    partial = target.with_suffix(".tmp")
    partial.write_text(json.dumps(counts))
    partial.replace(target)


def kinds(directory: Path, pids: list[int] | None = None) -> dict[str, int]:
    """The statements counted so far by kind, over the processes whose files are in
    ``directory`` (only ``pids``, if given)."""
    wanted = None if pids is None else {str(pid) for pid in pids}
    found: dict[str, int] = {}
    for entry in directory.iterdir():
        if entry.suffix == ".tmp" or (wanted is not None and entry.name not in wanted):
            continue
        try:
            counts = json.loads(entry.read_text() or "{}")
        except (OSError, ValueError):
            continue
        for kind, count in counts.items():
            found[kind] = found.get(kind, 0) + int(count)
    return found


def total(directory: Path, pids: list[int] | None = None) -> int:
    """The statements counted so far, all kinds (see :func:`kinds`)."""
    return sum(kinds(directory, pids).values())


def install() -> None:
    """Wrap mysqlclient's Connection (once per process) if ``BENCH_COUNT_STATEMENTS`` is set."""
    if not os.environ.get(ENV):
        return
    from MySQLdb.connections import Connection

    if getattr(Connection, "bench_counting", False):
        return
    query, commit, rollback, autocommit = (
        Connection.query,
        Connection.commit,
        Connection.rollback,
        Connection.autocommit,
    )

    def counting_query(self: Any, sql: Any) -> Any:
        _counted(self, kind_of(sql))
        return query(self, sql)

    def counting_commit(self: Any) -> Any:
        _counted(self, "COMMIT")
        return commit(self)

    def counting_rollback(self: Any) -> Any:
        _counted(self, "ROLLBACK")
        return rollback(self)

    def counting_autocommit(self: Any, on: Any) -> Any:
        if self.get_autocommit() != bool(on):  # mysqlclient sends nothing otherwise
            _counted(self, "SET autocommit")
        return autocommit(self, on)

    Connection.query = counting_query
    Connection.commit = counting_commit
    Connection.rollback = counting_rollback
    Connection.autocommit = counting_autocommit
    Connection.bench_counting = True
