"""Signals sent by the queue; ``sender`` is always the queue model class."""

from __future__ import annotations

from django.dispatch import Signal

#: A worker claimed rows: ``rows`` (a list), ``worker_id``.
job_claimed = Signal()
#: A row's success was recorded: ``row``.
job_succeeded = Signal()
#: A row's attempt failed: ``row``, ``error`` (exception or text), ``retry_at`` (None: it
#: ended FAILED, the dead state). Every FAILED end sends it: a handler's error, a row that
#: could not be loaded (``fail_by_key``) and the rescue's last allowed attempt.
job_failed = Signal()
#: A row ended CANCELLED (by its worker, its lease keeper or the rescue): ``row``, ``reason``.
#: Sent once committed, like the others; a cancelled ``TaskRecord`` sends ``task_finished``.
job_cancelled = Signal()
#: Rows whose lease ran out went back to READY (or FAILED): ``count``, ``failed`` (how many of
#: them ended FAILED). Sent by the rescue after its transaction.
job_rescued = Signal()
#: A late outcome was rejected (its claim was lost): ``row``, ``outcome`` ("succeeded",
#: "failed"), ``worker_id``.
job_rejected = Signal()
