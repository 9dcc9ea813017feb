# ruff: noqa: RUF001 - the report is typeset Markdown (en dashes, multiplication signs)
"""The descriptive parts of BENCHMARKS.md: the machine and setup, the contention table, and how
everything is measured (bench/report.py puts them together)."""

from __future__ import annotations

from typing import Any


def _load(values: list[float] | None) -> str:
    return " / ".join(f"{v:.2f}" for v in values) if values else "?"


def setup_lines(results: dict[str, Any]) -> list[str]:
    plan, machine = results["plan"], results["machine"]
    versions = machine.get("peer_versions", {})
    settings = machine.get("mariadb_settings", {})
    load = results.get("load", {})
    run_loads = [run.get("load") for run in results["runs"] if run.get("load")]
    per_run = "; ".join(
        f"run {i + 1}: {_load(pair[0])} → {_load(pair[-1])}" for i, pair in enumerate(run_loads)
    )
    return [
        "## Machine and setup",
        "",
        f"* Run: {results['began']} → {results['ended']} (UTC) on commit {machine.get('commit') or '?'}; "
        f"{plan['runs']} run(s), medians shown.",
        f"* Machine: {machine.get('cpu', '?')}, {machine.get('cores')} cores, "
        f"{machine.get('ram_gb')} GB RAM, Linux {machine.get('kernel')}; shared with other engineers' "
        "test suites (not a quiet machine). "
        f"Load average (1 / 5 / 15 min) at the start {_load(load.get('began'))}, at the end "
        f"{_load(load.get('ended'))}" + (f" ({per_run})." if per_run else "."),
        f"* Database: MariaDB {machine.get('mariadb')} on the same host, default settings "
        f"(innodb_flush_log_at_trx_commit={settings.get('innodb_flush_log_at_trx_commit')}, "
        f"buffer pool {int(settings.get('innodb_buffer_pool_size', 0)) // 2**20} MB, "
        f"binlog {settings.get('log_bin')}); sessions use READ COMMITTED. One database per system.",
        f"* Python {machine.get('python')}; django_dbqueue on Django {machine.get('django_ours')}; peers on "
        f"Django {versions.get('Django')}: dj_queue {versions.get('dj-queue')}, django-tasks-db "
        f"{versions.get('django-tasks-db')}, django-q2 {versions.get('django-q2')}; mysqlclient "
        f"{versions.get('mysqlclient')}.",
        f"* Backlog per drain: {plan['n_fast']:,} jobs for the batched drains (django_dbqueue lease and "
        "grouped, raw batch ack with claims of 100 and of 500), "
        f"{plan['n_per_job']:,} for one commit per job (django_dbqueue atomic, raw claim 100 + ack "
        f"each), {plan['n_claim1']:,} for raw claim 1, {plan['n_peer']:,} for the peers (a smaller "
        "backlog keeps the run short; the rate does not depend on it, and if anything a small table "
        f"favours the peers). Enqueue: {plan['n_one']:,} jobs one by one, {plan['n_bulk']:,} in bulk, "
        f"and {plan['n_one']:,} saves of each side of each `save()` pair per turn of the systems.",
        "",
    ]


def contention_lines(results: dict[str, Any]) -> list[str]:
    if not results.get("contention"):
        return []
    lines = [
        "### Deadlocks and lock waits: drain with concurrent enqueue and purge",
        "",
        "4 worker processes drain a backlog (the drain's backlog size) while another process enqueues "
        "a quarter as many jobs again one by one and a purger deletes 500 finished rows every 0.1 s "
        "(`DELETE … WHERE state = 'succeeded' LIMIT 500`). The InnoDB counters are server-wide; "
        "'background' is the same counter over an equally long quiet window just before (other users "
        "of the server).",
        "",
        "| system | jobs | seconds | rows purged | Innodb_deadlocks | Innodb_row_lock_waits (time) "
        "| background deadlocks / waits | exactly-once |",
        "|---|---|---|---|---|---|---|---|",
    ]
    names = {"lease": "django_dbqueue lease", "atomic": "django_dbqueue atomic", "batch": "raw SQL batch ack"}
    for item in results["contention"]:
        lines.append(
            f"| {names.get(item['variant'], item['variant'])} | {item['n']:,} | {item['wall_s']:.1f} "
            f"| {item['purged']:,} | {item['deadlocks']} | {item['lock_waits']} ({item['lock_time_ms']} ms) "
            f"| {item['background_deadlocks']:.0f} / {item['background_lock_waits']:.0f} "
            f"| {item['exactly_once']} |"
        )
    return [*lines, ""]


METHOD = """## How it is measured

* **Same server, one invocation.** All systems run against the same MariaDB, each in its own
  database (`bench_dbqueue`, `bench_raw`, `bench_djqueue`, `bench_tasksdb`, `bench_q2`; the ledger
  in `bench_ledger`). The order of the systems is shuffled in every run; ratios are computed
  within a run, then the median over the runs is shown.
* **No-op jobs.** Every handler only calls `bench.ledger.record(job_id)`: a list append; a thread
  in each worker process writes the ids to the ledger table every 50 ms with
  `INSERT … ON DUPLICATE KEY UPDATE runs = runs + 1`. The cost is the same for all systems.
* **django_dbqueue runs with its defaults**, attempt history (`DBQUEUE_HISTORY`) on; the rows
  "attempt history off" set `DBQUEUE_HISTORY = False` to show what the history costs.
* **Drain.** The backlog is enqueued in bulk (untimed), then the system's own worker command
  starts: `runqueue app.Model --concurrency N` (ours, default batch size and polling),
  `dj_queue` (N processes × 3 threads, polling 0.1 s), N × `db_worker --interval 0.1`
  (django-tasks-db runs one job at a time per process), `qcluster` (django-q2, N workers, ORM broker,
  poll 0.1 s, results not saved), `bench/raw.py work` (N forked processes). The rate is the backlog
  divided by the time from the first to the last handler call (ledger timestamps), so process
  start-up is not counted. The driver stops the workers (SIGTERM) once the ledger holds every job.
* **The raw-SQL loops** (`bench/raw.py`, mysqlclient, no ORM) claim like django_dbqueue: one
  transaction of `SELECT id … ORDER BY priority DESC, run_at, id LIMIT n FOR UPDATE SKIP LOCKED`,
  `UPDATE … WHERE id IN (…)` and `COMMIT`; then either one fenced autocommit `UPDATE` per job
  ("ack each") or one fenced `UPDATE` for the whole batch ("one ack per batch"). They keep no
  attempt history and read ids only.
* **Claim size.** django_dbqueue claims as many rows as fit in `DBQUEUE_BATCH_SECONDS` (0.1 s)
  of work by the time its jobs took, up to `DBQUEUE_BATCH_SIZE` (500; the first claim 100), so
  no-op jobs in lease mode are claimed 500 at a time: "raw SQL, claim 500, one ack per batch" is
  the like-for-like limit for lease mode, "claim 100" for the atomic modes.
* **Fastest peer.** A floor against "the fastest peer" divides by the highest rate any of the
  three peers reached in the same run with the same number of workers.
* **Exactly-once.** After each drain the ledger must hold every job id exactly once (`runs = 1`).
* **Enqueue.** One by one: the public API, each job committed on its own (`Model().save()`,
  `task.enqueue()`, `async_task()`, raw `INSERT` in autocommit). Bulk: one transaction
  (`Model.objects.bulk_enqueue()`, dj_queue's `enqueue_all()`, ORM `bulk_create` of
  django-tasks-db's rows — it has no bulk API —, raw `executemany` of 1,000 rows per statement).
  django-q2 has no bulk API. Every system is connected to the database before the clock
  starts. A run's figure is the median of 5 measurements, each on an emptied table, the
  systems taking turns. django_dbqueue and raw SQL are measured back to back in every turn
  (which goes first alternates), and a run's one-by-one and bulk ratios are the medians of
  those 5 paired ratios.
* **`save()` against the same model without QueueMixin.** In each of django_dbqueue's 5
  enqueue turns one process (`benchctl save-pair`) saves new rows of a queue model and of its
  twin without QueueMixin, in 10 alternating turns of a tenth of the one-by-one count each
  (who goes first alternates): `OrderJob` / `PlainOrder` (the same 9 order fields: customer,
  e-mail, status, total, currency, address, notes, two timestamps; the same values) and
  `NoopJob` / `PlainJob` (no domain fields: the mixin's columns against a bare key). Each turn
  gives a ratio of the two times (`Model(...).save()`, one `INSERT` and its autocommit each);
  a run's figure is the median of its 50 turns' ratios.
* **Pickup latency.** One idle worker; jobs are enqueued one at a time with random gaps
  (0.075–0.225 s); latency = handler start − enqueue commit. Before that, the statements the idle
  worker sends are counted for a few seconds (a Django execute wrapper in the benchmark app).
  The peers poll every 0.1 s (their defaults: dj_queue 0.1 s, django-tasks-db 1 s, django-q2 0.2 s);
  ours uses its defaults (`DBQUEUE_POLL_INTERVAL`, adaptive).
* **Worker RSS** is sampled from /proc every 0.25 s for every process of the worker command.
  **Worker CPU per job** is the user + system CPU of all processes of the worker command (all
  threads: the ledger writer too) between the first and the last job the driver saw in the
  ledger, divided by the jobs in between; the database server's CPU is not in it.

## How to reproduce

```
make bench          # installs the peers in bench/.venv-peers, runs everything, rewrites this file
make bench-quick    # a small run to check the harness (also rewrites this file)
bench/.venv-peers/bin/python bench/run.py --systems dbqueue,raw --runs 1 --no-write   # a subset
make bench-atomic-ceiling   # raw SQL only: what atomic mode's statements cost (bench/atomic_ceiling.py)
```

It needs MariaDB on 127.0.0.1:3306 (user root, no password; `BENCH_DB_*` variables change that) and
creates only databases named `bench_*`. Raw per-drain results go to `bench/out/results.json`,
worker logs to `bench/out/`; `bench/profile_worker.py` profiles one worker in-process.
"""


PROFILE = """## Where the time goes (profiles of this core)

Profiled in-process on this machine on 2026-11-24 between 03:33 and 03:36 UTC (load average
about 2 on its 2 cores), MariaDB 10.11, the library of commit 7fd9e20; not regenerated by
`make bench`. Shares are of pyinstrument's wall time (the profiler inflates Python; the
commands print the rate without it too):
`.venv/bin/python bench/profile_worker.py --model dbqapp.<Model> --n N [--cprofile]` and
`.venv/bin/python bench/profile_enqueue.py --pair bare|order --cprofile`.

* **Atomic mode, one transaction per job** (`AtomicJob`, 2,000 jobs: 364 jobs/s without the
  profiler, 1,175 µs of CPU per job in the process). A job is six round trips where the raw
  "ack each" loop has one: Django's `atomic()` switches autocommit off and on around it (two
  driver calls that execute wrappers do not see), the fenced `SELECT … FOR UPDATE`, the
  success `UPDATE`, the attempt row's `INSERT` and `COMMIT`; and about 2,650 Python function
  calls (cProfile), mostly building and compiling the three ORM statements. Of the wall time:
  the success (`outcomes.succeed`, `django_dbqueue/outcomes.py:77`) 48% — the attempt row
  (`bulk_create`, `django_dbqueue/history.py:75`) 21%, the `UPDATE` (`outcomes.py:87`) 19%,
  building the fenced QuerySet (`outcomes.py:46`) 5% —; the fenced lock
  (`outcomes.lock_held`, `outcomes.py:256`) 23%; leaving `atomic()` (commit and autocommit
  back on, `django_dbqueue/worker/jobs.py:118`) 18%; entering it 3%; the claims
  (`query.py:95`, 59 claims for 2,000 jobs) 7%.
* **Lease mode** (`NoopJob`, 20,000 jobs: 5,498 jobs/s, 84 µs of CPU per job; the rows
  "attempt history off" above show what the history costs in the drains). The attempt
  history is more than half the wall time: `write_attempts` (`django_dbqueue/history.py:68`)
  57%, of which Django's `bulk_create` (`history.py:75`) 51% (the `INSERT`'s own execution
  10%) and building the `QueueAttempt` instances (`history.py:73`) 5%. Under cProfile,
  Django's preparation of the ten values of each attempt row (`prepare_value`, four of them
  datetimes) is 27% of the profiled time and mysqlclient's escaping of them 12%. The success
  `UPDATE` is 6%; the claim 29%: its transaction (`query.py:120`) 14% and loading the up to
  500 claimed rows as instances (`query.py:152`) 15%.
* **Atomic mode, 100 jobs per transaction** (`GroupedJob`, 20,000 jobs: 3,314 jobs/s, 185 µs
  of CPU per job). Each handler's savepoint (`atomic()` at `django_dbqueue/worker/jobs.py:184`)
  is a `SAVEPOINT` and a `RELEASE SAVEPOINT` round trip per job (2.05 statements per job): 42%
  of the wall time (20% each). The attempt history (`history.py:68`) 28%, its `bulk_create`
  24%; the success `UPDATE` 4%, the group's lock 5%, the claims 16%.
* **`bulk_enqueue()`** (20,000 `NoopJob` rows as `{}` mappings: 5,662 rows/s under the
  profiler): Django's `bulk_create` (`django_dbqueue/query.py:200`) 87% of the time, building
  the instances (`query.py:189`) 11%. Every row carries the mixin's eleven values; the raw
  baseline sends one column and builds no objects.
* **`save()` of a new row** (10 alternating turns of 300 saves each: `NoopJob` 653 µs against
  `PlainJob` 548 µs, a time ratio of 1.21; `OrderJob` 1,302 µs against `PlainOrder` 1,191 µs,
  1.15). The `INSERT`'s round trip is most of each save; what the mixin adds is its eleven
  `queue_*` columns (`django_dbqueue/models/mixin.py:68`–`82`), all of them in the `INSERT`
  (NULLs included): under cProfile Django's SQL compilation of the row (`as_sql`) took 216
  against 44 µs per save for the bare pair and 309 against 178 µs for the order pair, and
  the statement the server parses is longer.
"""
