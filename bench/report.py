# ruff: noqa: RUF001 - the report is typeset Markdown (en dashes, multiplication signs)
"""Turn bench/run.py's results into BENCHMARKS.md (floors first) and a PNG chart."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bench import floors
from bench.chart import chart
from bench.floors import WORKERS, median, rate
from bench.floors import enqueue_ratio as _enqueue_ratio
from bench.report_text import HEADER, LEFT, METHOD, PROFILE, QUICK, contention_lines, setup_lines

#: Sections that other targets write, at the end of BENCHMARKS.md, kept by this rewrite.
KEPT = (
    "## Scale: 10 million rows",
    "## Spark pipeline on a standalone cluster",
    "## History at 10 million rows",
    "## Fair claim (issue #37)",
)


def kept_sections(content: str) -> str:
    """BENCHMARKS.md's text from the first kept section to its end ('' if none)."""
    starts = [at for heading in KEPT if (at := content.find(heading)) >= 0]
    return content[min(starts) :].rstrip("\n") if starts else ""


ROWS = (
    ("raw", "claim1", "raw SQL, claim 1 (SKIP LOCKED), ack each"),
    ("raw", "claim100", "raw SQL, claim 100, ack each"),
    ("raw", "batch", "raw SQL, claim 100, one ack UPDATE per batch"),
    ("raw", "batch500", "raw SQL, claim 500, one ack UPDATE per batch"),
    ("dbqueue", "lease", "**django_dbqueue**, lease mode, batched outcomes"),
    ("dbqueue", "lease-nohist", "**django_dbqueue**, lease mode, attempt history off"),
    ("dbqueue", "atomic", "**django_dbqueue**, atomic mode (1 job per transaction)"),
    ("dbqueue", "atomic-nohist", "**django_dbqueue**, atomic mode, attempt history off"),
    ("dbqueue", "grouped", "**django_dbqueue**, atomic mode, 100 jobs per transaction"),
    (
        "dbqueue",
        "grouped-optimistic",
        "**django_dbqueue**, atomic mode, 100 jobs per transaction, optimistic (no savepoints)",
    ),
    ("dbqueue", "workflow", "**django_dbqueue**, a 1-step workflow, atomic mode"),
    ("djqueue", "default", "dj_queue"),
    ("tasksdb", "default", "django-tasks-db"),
    ("q2", "default", "django-q2 (ORM broker)"),
)
SHORT = {
    "raw": "raw SQL",
    "dbqueue": "django_dbqueue",
    "djqueue": "dj_queue",
    "tasksdb": "django-tasks-db",
    "q2": "django-q2",
}
PEER_NAMES = (("djqueue", "dj_queue"), ("tasksdb", "django-tasks-db"), ("q2", "django-q2"))
LEASE, ATOMIC = ("dbqueue", "lease"), ("dbqueue", "atomic")
#: Ratios shown per worker count besides the floors (what they are made of, and the peers).
COMPARISONS = [
    (LEASE, ("raw", "batch500"), "lease mode / raw claim 500 + batch ack"),
    (LEASE, ("raw", "batch"), "lease mode / raw claim 100 + batch ack"),
    (("dbqueue", "lease-nohist"), ("raw", "batch500"), "lease mode, history off / raw claim 500 + batch ack"),
    (ATOMIC, ("raw", "claim100"), "atomic mode / raw claim 100 + ack each"),
    (
        ("dbqueue", "atomic-nohist"),
        ("raw", "claim100"),
        "atomic mode, history off / raw claim 100 + ack each",
    ),
    (("dbqueue", "grouped"), ("raw", "batch"), "atomic, 100 per transaction / raw claim 100 + batch ack"),
    (
        ("dbqueue", "grouped-optimistic"),
        ("raw", "batch"),
        "atomic, 100 per transaction, optimistic / raw claim 100 + batch ack",
    ),
    (("dbqueue", "workflow"), ATOMIC, "1-step workflow / atomic job of the same body"),
    *((LEASE, (peer, "default"), f"lease mode / {name}") for peer, name in PEER_NAMES),
    *((ATOMIC, (peer, "default"), f"atomic mode / {name}") for peer, name in PEER_NAMES),
]


def _fmt(value: float | None, digits: int = 0) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _ratio(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.2f}×" if value < 10 else f"{value:.1f}×"


def _cost(value: float | None, digits: int, unit: str = "") -> str:
    return "–" if value is None else f"{value:,.{digits}f}{unit}"


def worker_counts(results: dict[str, Any]) -> tuple[int, ...]:
    """The worker counts this run drained with (the quick run: 1 and 4)."""
    return tuple(results["plan"].get("workers") or WORKERS)


def medians(results: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    runs = results["runs"]
    table: dict[tuple[str, str], dict[str, Any]] = {}
    for system, variant, _ in ROWS:
        row: dict[str, Any] = {w: median([rate(run, system, variant, w) for run in runs]) for w in WORKERS}
        drains = [d for run in runs for d in run["drain"] if (d["system"], d["variant"]) == (system, variant)]
        row["rss"] = max((d["rss"]["max_process_mb"] for d in drains), default=None)
        for key, name in (("cpu_us_per_job", "cpu"), ("statements_per_job", "statements")):
            row[name] = {w: floors.drain_cost(runs, (system, variant), w, key) for w in WORKERS}
        row["kinds"] = floors.statement_kinds(runs, (system, variant), 1)
        if variant == {"raw": "claim1", "dbqueue": "lease"}.get(system, "default"):
            enq = [e for run in runs for e in run["enqueue"] if e["system"] == system]
            row["one"] = median([e["one"] for e in enq])
            row["bulk"] = median([e["bulk"] for e in enq])
            row["bulk_api"] = enq[0]["bulk_api"] if enq else ""
            picks = [p for run in runs for p in run["pickup"] if p["system"] == system]
            row["p50"] = median([p["p50_ms"] for p in picks])
            row["p95"] = median([p["p95_ms"] for p in picks])
            row["idle_qps"] = median([p["idle_queries_per_s"] for p in picks])
            row["idle_sent"] = median([p.get("idle_statements_per_s") for p in picks])
        table[(system, variant)] = row
    return table


def floor_lines(results: dict[str, Any]) -> list[str]:
    """The floors section: every floor of issue #33's table as a line, met or missed, with the
    figure this run measured (and each round's, where the figure is a median over rounds)."""
    levels = (results.get("claim_cost") or {}).get("levels") or []
    largest = f" ({levels[-1]['finished']:,} finished rows)" if len(levels) > 1 else ""
    lines = [
        "## Floors (issues #33 and #37)",
        "",
        "Every line of issue #33's table, issue #37's claim-speed bounds and issue #20's claim-cost floor, "
        "which still stands. A drain "
        "ratio is taken within each round, then the median over the rounds (each round's figure in "
        "the last column); CPU per job is the median over the rounds (bench/costs.py). The `save()` "
        "time ratio is lower-is-better, the other ratios are of rates. “Before the rebuild” and "
        "“when filed” are the issue's own figures. The flow-control lines come from "
        "`bench/flow_claim.py --json`, the fair and aging claim's (issue #37) from "
        "`bench/fair_claim.py --json` (each ratio the median of the rounds' own), both run by "
        "`make bench` after the drains; a line that this run did not measure says so.",
        "",
        "| floor | target | before the rebuild | when filed | this run | verdict | each round |",
        "|---|---|---|---|---|---|---|",
    ]
    for floor, value, _ in floors.evaluate(results):
        label = floor.label + (largest if floor.key == "claim-cost" else "")
        figure = floor.show(value) + (
            f" ({floor.beside(results)})" if floor.beside and value is not None else ""
        )
        verdict = floors.verdict(floor, value)
        verdict = f"**{verdict}**" if verdict.startswith("MISSED") else verdict
        each = floor.per_run(results)
        rounds = " / ".join(floor.show(v) for v in each) if len(each) > 1 else ""
        cells = (label, floor.target, floor.before, floor.at_issue, figure, verdict, rounds)
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def write(results: dict[str, Any], md_path: Path, png_path: Path) -> None:
    table = medians(results)
    runs = results["runs"]
    plan = results["plan"]
    counts = worker_counts(results)
    lines: list[str] = ["# Benchmarks", "", *HEADER]
    add = lines.append
    if plan["quick"]:
        add(QUICK)
        add("")
    if not results.get("complete"):
        add(f"**Incomplete run: {len(runs)} of {plan['runs']} rounds finished when this file was written.**")
        add("")
    lines += floor_lines(results)
    lines += setup_lines(results)
    lines += results_lines(results, table, counts)
    add(f"![drain throughput]({os.path.relpath(png_path, md_path.parent)})")
    add("")
    lines += cost_lines(table, counts)
    add("### Ratios of the drains (medians of the ratios measured within each round)")
    add("")
    add("| comparison | " + " | ".join(_workers(w) for w in counts) + " |")
    add("|---|" + "---|" * len(counts))
    for top, bottom, label in COMPARISONS:
        cells = [_ratio(floors.drain_ratio(runs, top, bottom, w)) for w in counts]
        if any(c != "–" for c in cells):
            add(f"| {label} | {' | '.join(cells)} |")
    for top, label in ((LEASE, "lease mode"), (ATOMIC, "atomic mode")):
        cells = [_ratio(floors.peer_ratio(runs, top, w)) for w in counts]
        if any(c != "–" for c in cells):
            add(f"| {label} / fastest peer of the round | {' | '.join(cells)} |")
    add("")
    lines += save_lines(results)
    exact = [d for run in runs for d in run["drain"]] + list(results.get("contention", []))
    failed = [d for d in exact if d["exactly_once"] != "ok"]
    add("### Exactly-once")
    add("")
    add(
        "Every drain checks its ledger (one row per job id, `runs` counts executions): "
        f"**{len(exact) - len(failed)} of {len(exact)} drains ran every job exactly once**. "
        "A drain that failed the check is left out of the medians and ratios above."
    )
    for item in failed:
        add(f"* {item['system']}/{item['variant']} ×{item.get('workers', 4)}: {item['exactly_once']}")
    add("")
    lines += claim_cost_lines(results)
    lines += contention_lines(results)
    if results.get("errors"):
        add("### Scenarios that failed")
        add("")
        lines += [f"* {error}" for error in results["errors"]]
        add("")
    lines += every_drain_lines(runs, counts)
    add(LEFT)
    add(PROFILE)
    add(METHOD)
    # The sections of make bench-scale, bench-spark and bench-history are not this run's: they
    # are carried over as they stand.
    if kept := kept_sections(md_path.read_text() if md_path.exists() else ""):
        lines.extend(["", kept])
    md_path.write_text("\n".join(lines) + "\n")
    chart([(label.replace("**", ""), table[(s, v)]) for s, v, label in ROWS], png_path)


def _idle(row: dict[str, Any]) -> str:
    if row.get("idle_qps") is None:
        return "–"
    return f"{_fmt(row['idle_qps'], 1)} ({_fmt(row.get('idle_sent'), 1)})"


def _workers(count: int) -> str:
    return f"{count} worker{'s' if count > 1 else ''}"


def results_lines(
    results: dict[str, Any], table: dict[tuple[str, str], dict[str, Any]], counts: tuple[int, ...]
) -> list[str]:
    """The results table: rates, and beside them what a job costs the worker at 1 worker."""
    lines = [
        "## Results (jobs/s unless stated; medians over the rounds)",
        "",
        "| system | enqueue one-by-one | bulk | "
        + " | ".join(f"drain, {_workers(w)}" for w in counts)
        + " | CPU per job (1 worker) | statements per job (1 worker) | pickup p50 / p95 "
        "| idle worker, queries/s (statements/s) | max RSS of a process |",
        "|---|---|---|" + "---|" * len(counts) + "---|---|---|---|---|",
    ]
    for system, variant, label in ROWS:
        row = table[(system, variant)]
        if all(row[w] is None for w in counts):
            continue
        pick = f"{row['p50']:.0f} / {row['p95']:.0f} ms" if row.get("p50") is not None else "–"
        drains = " | ".join(_fmt(row[w]) for w in counts)
        lines.append(
            f"| {label} | {_fmt(row.get('one'))} | {_fmt(row.get('bulk'))} | {drains} "
            f"| {_cost(row['cpu'][1], 0, ' µs')} | {_cost(row['statements'][1], 3)} | {pick} "
            f"| {_idle(row)} | {_fmt(row['rss'])} MB |"
        )
    return [*lines, ""]


def cost_lines(table: dict[tuple[str, str], dict[str, Any]], counts: tuple[int, ...]) -> list[str]:
    """CPU and statements per job for every system, mode and worker count."""
    lines = [
        "### What a job costs the worker (medians over the rounds)",
        "",
        "CPU: user + system seconds of every process of the worker command (/proc), per job. "
        "Statements: what those processes sent to the server, counted at the driver "
        "(bench/stmtcount.py: every query, `COMMIT`, `ROLLBACK` and `SET autocommit`; the ledger's "
        "own writes left out), per job, and at 1 worker by kind (the statement's first word; "
        "`SET autocommit` is the driver switching autocommit). Both between the first and the "
        "last job of the drain.",
        "",
        "| system | "
        + " | ".join(f"CPU µs, {_workers(w)}" for w in counts)
        + " | "
        + " | ".join(f"statements, {_workers(w)}" for w in counts)
        + " | statements by kind, 1 worker |",
        "|---|" + "---|" * (2 * len(counts) + 1),
    ]
    for system, variant, label in ROWS:
        row = table[(system, variant)]
        if all(row[w] is None for w in counts):
            continue
        cpu = " | ".join(_cost(row["cpu"][w], 0) for w in counts)
        statements = " | ".join(_cost(row["statements"][w], 3) for w in counts)
        by_kind = " · ".join(f"{kind} {per:.3f}" for kind, per in row["kinds"].items() if per >= 0.0005)
        lines.append(f"| {label} | {cpu} | {statements} | {by_kind or '–'} |")
    return [*lines, ""]


def _load_at(item: dict[str, Any]) -> str:
    load = item.get("load") or []
    if len(load) < 2 or not load[0] or not load[-1]:
        return ""
    return f" ({load[0][0]:.1f}→{load[-1][0]:.1f})"


def every_drain_lines(runs: list[dict[str, Any]], counts: tuple[int, ...]) -> list[str]:
    """Every drain's rate per round, with the machine's 1-minute load average at its start and
    end (the machine is shared: a figure measured under load says so)."""
    lines = [
        "### Every drain (jobs/s per round; 1-minute load average at the drain's start → end)",
        "",
        "| system | workers | " + " | ".join(f"round {i + 1}" for i in range(len(runs))) + " |",
        "|---|---|" + "---|" * len(runs),
    ]
    for system, variant, label in ROWS:
        for workers in counts:
            cells = []
            for run in runs:
                item = next(
                    (
                        d
                        for d in run["drain"]
                        if (d["system"], d["variant"], d["workers"]) == (system, variant, workers)
                    ),
                    None,
                )
                value = rate(run, system, variant, workers)
                cells.append(_fmt(value) + (_load_at(item) if item else "") if item else "–")
            if any(cell != "–" for cell in cells):
                lines.append(f"| {label} | {workers} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def save_lines(results: dict[str, Any]) -> list[str]:
    runs = results["runs"]
    lines = [
        "### Enqueue",
        "",
        "| what | with QueueMixin | without | ratio |",
        "|---|---|---|---|",
    ]
    names = {"order": "`save()` of a new order (9 domain fields)", "bare": "`save()` of a new bare row"}
    for pair, name in names.items():
        saves = [((e.get("save") or {}).get(pair) or {}) for run in runs for e in run["enqueue"]]
        mine, plain = median([s.get("queue_us") for s in saves]), median([s.get("plain_us") for s in saves])
        ratio = floors.save_ratio(runs, pair)
        lines.append(
            f"| {name}, µs per save | {_fmt(mine)} µs | {_fmt(plain)} µs | {_ratio(ratio)} the time |"
        )
    lines += [
        "",
        f"One-by-one `save()` of a bare queue row / raw `INSERT` + commit (rows per second, paired turns): "
        f"{_ratio(_enqueue_ratio(runs, 'one'))}; `bulk_enqueue()` of rows with JSON payloads / raw "
        f"multi-row `INSERT` of the same: {_ratio(_enqueue_ratio(runs, 'bulk'))}.",
        "",
    ]
    apis = [
        f"{SHORT.get(e['system'], e['system'])}: {e['bulk_api']}"
        for e in (runs[0]["enqueue"] if runs else [])
        if e.get("bulk_api")
    ]
    if apis:
        lines += ["Bulk enqueue used: " + "; ".join(apis) + ".", ""]
    return lines


def claim_cost_lines(results: dict[str, Any]) -> list[str]:
    cost = results.get("claim_cost")
    if not cost:
        return []
    lines = [
        "### Claim cost on a wide domain table",
        "",
        "`WideJob` is an order-like table (customer, e-mail, address, notes, totals…) with QueueMixin, "
        "one table per level. Each is filled with finished (SUCCEEDED) rows from `seq_1_to_N`, then "
        f"{(2 * results['plan']['claims'] + 1) * 100:,} ready rows are added. Then "
        f"{results['plan']['claims']} rounds each claim 100 rows from every table in a shuffled order, "
        "django_dbqueue's `claim(100)` and the raw SQL claim in turn, so the levels share the same "
        "minutes of the shared machine; medians are shown. 'Reads' are the session's Handler_read_* "
        "counters for one whole claim, i.e. index entries/rows the server touched.",
        "",
        "| finished rows | django_dbqueue `claim(100)` | reads | raw SQL claim of 100 | reads "
        "| plan (type, key, Extra) |",
        "|---|---|---|---|---|---|",
    ]
    for level in cost["levels"]:
        plan_text = "; ".join(f"{p['type']}, {p['key']}, {p['Extra']}" for p in level["plan"])
        lines.append(
            f"| {level['finished']:,} | {level['ms_per_claim']:.2f} ms | {level['reads_per_claim']:,.0f} "
            f"| {level['raw_ms_per_claim']:.2f} ms | {level['raw_reads_per_claim']:,.0f} | {plan_text} |"
        )
    return [*lines, ""]
