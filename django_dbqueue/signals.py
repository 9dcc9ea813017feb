"""Signals sent by the queue; ``sender`` is always the queue model class."""

from __future__ import annotations

from django.dispatch import Signal

#: A worker claimed rows: ``rows`` (a list), ``worker_id``.
job_claimed = Signal()
#: A row's success was recorded: ``row``.
job_succeeded = Signal()
#: A row's attempt failed: ``row``, ``error`` (exception or text), ``retry_at`` (None: it
#: ended FAILED, the dead state).
job_failed = Signal()
#: Rows whose lease ran out went back to READY (or FAILED): ``count``, ``failed`` (how many of
#: them ended FAILED). Sent by the rescue after its transaction.
job_rescued = Signal()
#: A late outcome was rejected (its claim was lost): ``row``, ``outcome`` ("succeeded",
#: "failed"), ``worker_id``.
job_rejected = Signal()
