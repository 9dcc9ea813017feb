"""What a drain's jobs cost the worker command, per job: CPU and statements.

The driver samples the worker command's CPU seconds (/proc, bench/procs.py) and the statements
its processes sent (bench/stmtcount.py) when the first job shows up in the ledger and when the
last one does; the jobs in between are the ones the two differences paid for. Both move with
what the code does rather than with the shared machine's load, which is why the report gives
them beside the rates. Plain Python: unit-tested.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def per_job(cost: Mapping[str, Any], n: int) -> dict[str, Any]:
    """CPU µs and statements per job from the samples in ``cost`` (``cpu_first``/``cpu_last``:
    CPU seconds; ``statements_first``/``statements_last``: statements so far by kind;
    ``first_seen``: the jobs already in the ledger at the first sample) for a drain of ``n``
    jobs. None where a sample is missing, or where the first sample already saw every job (a
    drain too short to measure)."""
    jobs = n - cost["first_seen"] if "first_seen" in cost else 0
    if jobs <= 0 or "cpu_last" not in cost:
        return {
            "cpu_us_per_job": None,
            "statements_per_job": None,
            "statement_kinds_per_job": {},
            "cost_jobs": max(jobs, 0),
        }
    first, last = cost["statements_first"], cost["statements_last"]
    kinds = {kind: (last[kind] - first.get(kind, 0)) / jobs for kind in sorted(last)}
    return {
        "cpu_us_per_job": (cost["cpu_last"] - cost["cpu_first"]) * 1e6 / jobs,
        "statements_per_job": sum(kinds.values()),
        "statement_kinds_per_job": {kind: per for kind, per in kinds.items() if per},
        "cost_jobs": jobs,
    }
