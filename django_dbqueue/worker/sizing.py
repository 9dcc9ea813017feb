"""How many rows a worker claims at once, when ``--batch-size`` does not say.

A claim is a transaction of its own (a locking SELECT, an UPDATE, a commit), so a batch of fast
jobs should be large: the claim is then paid once for many jobs. But the rows of a batch wait
for the jobs before them, unavailable to idle workers: a batch of 100 one-second jobs keeps the
last row from the other workers for 100 s. A fixed size is wrong for one kind of job or the other.

So the claim follows how long this worker's jobs of the model take: as many rows as fit in
``DBQUEUE_BATCH_SECONDS`` of work, from a moving average of the time per job of recent batches
(handlers and outcome writes), never more than ``DBQUEUE_BATCH_SIZE`` and never fewer than an
atomic model's group. Until a batch has been measured, the fixed default applies.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..conf import settings

#: Weight of the newest batch in the moving average of the time per job.
SMOOTHING = 0.3


@dataclass
class ClaimSizer:
    """Per model: the moving average of seconds per job, and the claim size it gives."""

    _seconds_per_job: dict[type, float] = field(default_factory=dict)

    def size(self, model: type, default: int, minimum: int = 1) -> int:
        """Rows to claim for ``model``; ``default`` until a batch of it has been measured."""
        per_job = self._seconds_per_job.get(model)
        if per_job is None:
            return default
        maximum = max(settings.BATCH_SIZE, minimum)
        if per_job <= 0:
            return maximum
        return max(minimum, min(maximum, int(settings.BATCH_SECONDS / per_job)))

    def observe(self, model: type, jobs: int, seconds: float) -> None:
        """Record that ``jobs`` jobs of ``model`` took ``seconds`` (claim to last outcome)."""
        if jobs <= 0:
            return
        sample = seconds / jobs
        previous = self._seconds_per_job.get(model)
        self._seconds_per_job[model] = (
            sample if previous is None else previous + SMOOTHING * (sample - previous)
        )


#: The first claim of a lease-mode model, before its jobs were timed (DBQUEUE_BATCH_SIZE
#: if smaller). Later claims take as many rows as fit in DBQUEUE_BATCH_SECONDS, up to
#: DBQUEUE_BATCH_SIZE: for fast jobs the claim is the larger cost per job, paid once per claim.
FIRST_LEASE_CLAIM = 100


def atomic_group(model: type) -> int:
    """Jobs per transaction in atomic mode (``queue_atomic_group``); 1 in lease mode."""
    if not getattr(model, "queue_atomic", False):
        return 1
    return max(int(getattr(model, "queue_atomic_group", 1) or 1), 1)


def default_batch_size(model: type) -> int:
    """Rows claimed at once until the worker has timed a batch of the model.

    An atomic model's jobs may be slow (they hold a transaction each): its first claim is
    small, so one worker does not sit on rows that idle workers could run."""
    if getattr(model, "queue_atomic", False):
        return max(10, atomic_group(model))
    return min(settings.BATCH_SIZE, FIRST_LEASE_CLAIM)
