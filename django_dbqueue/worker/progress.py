"""The ``runqueue --burst`` progress bar: rows still due or running, drained to zero.

The workers are processes of their own that log to the same terminal: a line written there while
the bar is drawn would be glued to the bar. So while the bar is up, this process's stderr (which
the workers inherit when they are forked) is a pipe, read by the bar, whose lines it writes above
itself with ``tqdm.write()``, as ``tqdm.contrib.logging.logging_redirect_tqdm`` does in one process.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from django.db import DatabaseError, connections

from ..states import QueueState

if TYPE_CHECKING:
    from ..models import QueueMixin


class Progress:
    """A tqdm bar over the rows still due or running, refreshed about once a second."""

    def __init__(self, models: Sequence[type[QueueMixin]], database: str | None, stdout: TextIO) -> None:
        from tqdm import tqdm

        self.models = models
        self.database = database
        self._next = 0.0
        self.start = self._remaining()
        # A pseudo-terminal may report a 0x0 size (e.g. under `script`), and tqdm hides a bar
        # on a screen with no rows: fall back to 100x24.
        size = shutil.get_terminal_size((100, 24))
        self._terminal = stdout
        self._logs, self._saved_stderr = self._capture_stderr(stdout)
        self._pending = b""
        self.bar = tqdm(
            total=self.start,
            unit="job",
            file=self._terminal,
            desc="draining",
            ncols=min(size.columns or 100, 120),
            nrows=size.lines or 24,
        )
        connections.close_all()

    def _remaining(self) -> int:
        total = 0
        for model in self.models:
            qs = model.queue_queryset(self.database or "default")
            total += qs.ready().count() + qs.filter(queue_state=QueueState.RUNNING).count()
        return total

    def _capture_stderr(self, stdout: TextIO) -> tuple[int | None, int | None]:
        """Point fd 2 at a pipe read by :meth:`_write_logs`; the bar keeps the terminal.

        Only when the bar's stream is this process's stderr (as runqueue passes it): anything else
        is left alone."""
        try:
            if stdout.fileno() != sys.stderr.fileno():
                return None, None
        except (AttributeError, OSError, ValueError):
            return None, None
        sys.stderr.flush()
        saved = os.dup(2)
        self._terminal = os.fdopen(
            os.dup(saved), "w", buffering=1, encoding=stdout.encoding, errors="replace"
        )
        reader, writer = os.pipe()
        os.set_blocking(reader, False)
        os.dup2(writer, 2)
        os.close(writer)
        return reader, saved

    def _write_logs(self, final: bool = False) -> None:
        """Each whole line the workers (or this process) wrote to stderr, above the bar."""
        if self._logs is None:
            return
        while True:
            try:
                chunk = os.read(self._logs, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            self._pending += chunk
        *lines, self._pending = self._pending.split(b"\n")
        if final and self._pending:
            lines, self._pending = [*lines, self._pending], b""
        for line in lines:
            self.bar.write(line.decode(errors="replace"), file=self._terminal)

    def refresh_from_db(self, force: bool = False) -> None:
        self._write_logs()
        now = time.monotonic()
        if now < self._next and not force:
            return
        self._next = now + 1.0
        try:
            remaining = self._remaining()
        except DatabaseError:
            return
        finally:
            connections.close_all()
        if remaining > self.start:  # more was enqueued meanwhile
            self.bar.total = self.bar.n + remaining
            self.start = self.bar.total
        self.bar.update(max(self.start - remaining - self.bar.n, 0))

    def close(self) -> None:
        try:
            self.refresh_from_db(force=True)
            sys.stderr.flush()
            self._write_logs(final=True)
            self.bar.close()
        finally:
            if self._saved_stderr is not None and self._logs is not None:
                # The terminal back on fd 2 for whatever comes after the bar.
                os.dup2(self._saved_stderr, 2)
                os.close(self._saved_stderr)
                os.close(self._logs)
                self._terminal.close()
                self._saved_stderr = self._logs = None
