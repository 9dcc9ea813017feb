"""What a worker did: counts it logs at the end and reports to its supervisor."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class WorkerStats:
    claimed: int = 0
    succeeded: int = 0
    failed: int = 0  # failed attempts, retried or not
    released: int = 0
    lost: int = 0  # outcomes rejected because the claim was lost
    rescued: int = 0
    cancelled: int = 0  # ended CANCELLED on request while this worker held them
    parked: int = 0  # runs that parked their row (a workflow's next step, sleep or wait)

    @property
    def processed(self) -> int:
        return self.succeeded + self.failed

    def as_dict(self) -> dict[str, int]:
        return asdict(self)
