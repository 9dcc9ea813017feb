"""The fault table of issue #21: one hostile fault per scenario, each on a fresh database of
the shared servers, consumed by real ``manage.py runqueue`` processes; counts what was lost,
doubled, stuck or failed, and how long the queue took to recover. Not part of ``make test``:
``make faults`` (or ``python -m tests.chaos.faults``) runs it; RELIABILITY.md shows a run."""
