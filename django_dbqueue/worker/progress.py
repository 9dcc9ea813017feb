"""The ``runqueue --burst`` progress bar: rows still due or running, drained to zero."""

from __future__ import annotations

import shutil
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
        self.bar = tqdm(
            total=self.start,
            unit="job",
            file=stdout,
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

    def refresh_from_db(self, force: bool = False) -> None:
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
        self.refresh_from_db(force=True)
        self.bar.close()
