# ruff: noqa: RUF001 - the report is typeset Markdown (en dashes, multiplication signs)
"""Turn bench/run.py's results into BENCHMARKS.md (floors first) and a PNG chart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench import before, floors
from bench.chart import chart
from bench.floors import WORKERS, median, rate
from bench.floors import enqueue_ratio as _enqueue_ratio
from bench.report_text import METHOD, PROFILE, contention_lines, setup_lines

#: Sections that other targets write, at the end of BENCHMARKS.md, kept by this rewrite.
KEPT = (
    "## Scale: 10 million rows",
    "## Spark pipeline on a standalone cluster",
    "## History at 10 million rows",
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
    *((LEASE, (peer, "default"), f"lease mode / {name}") for peer, name in PEER_NAMES),
    *((ATOMIC, (peer, "default"), f"atomic mode / {name}") for peer, name in PEER_NAMES),
]


def _fmt(value: float | None, digits: int = 0) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _ratio(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.2f}×" if value < 10 else f"{value:.1f}×"


def _figure(floor: floors.Floor, value: float | None) -> str:
    if value is None:
        return "not measured"
    return f"{value:.0f} ms" if floor.unit == "ms" else _ratio(value)


def medians(results: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    runs = results["runs"]
    table: dict[tuple[str, str], dict[str, Any]] = {}
    for system, variant, _ in ROWS:
        row: dict[str, Any] = {w: median([rate(run, system, variant, w) for run in runs]) for w in WORKERS}
        drains = [d for run in runs for d in run["drain"] if (d["system"], d["variant"]) == (system, variant)]
        row["rss"] = max((d["rss"]["max_process_mb"] for d in drains), default=None)
        ok1 = [d.get("cpu_us_per_job") for d in drains if d["workers"] == 1 and d["exactly_once"] == "ok"]
        row["cpu1"] = median(ok1)
        if variant == {"raw": "claim1", "dbqueue": "lease"}.get(system, "default"):
            enq = [e for run in runs for e in run["enqueue"] if e["system"] == system]
            row["one"] = median([e["one"] for e in enq])
            row["bulk"] = median([e["bulk"] for e in enq])
            row["bulk_api"] = enq[0]["bulk_api"] if enq else ""
            picks = [p for run in runs for p in run["pickup"] if p["system"] == system]
            row["p50"] = median([p["p50_ms"] for p in picks])
            row["p95"] = median([p["p95_ms"] for p in picks])
            row["idle_qps"] = median([p["idle_queries_per_s"] for p in picks])
        table[(system, variant)] = row
    return table


def floor_lines(results: dict[str, Any], old: dict[str, Any]) -> list[str]:
    levels = (results.get("claim_cost") or {}).get("levels") or []
    largest = f" ({levels[-1]['finished']:,} finished rows)" if len(levels) > 1 else ""
    lines = [
        "## Floors (issue #20, “Speed to keep”)",
        "",
        "Each drain floor is a ratio of two rates measured in the same run, then the median over the "
        "runs (each run's figure in the last column); the `save()` figure is a ratio of TIMES "
        "(lower is better), the others of rates. "
        f"“Before” is the previous core (its `make bench` at commit {before.COMMIT}, on this machine; "
        "its drain ratios recomputed from that file's per-run rates the same way).",
        "",
        f"| floor | target | before ({before.COMMIT}) | this core | met? | this core, each run |",
        "|---|---|---|---|---|---|",
    ]
    for floor, value, met in floors.evaluate(results):
        label = floor.label + (largest if floor.key == "claim-cost" else "")
        was = _figure(floor, floor.figure(old)) if old else "not available"
        verdict = {True: "met", None: "–"}.get(met) or (
            f"**MISSED** by {floor.shortfall(value):.0%}" if value is not None else "**MISSED**"
        )
        each = floor.per_run(results) if floor.key != "claim-cost" else []
        runs = " / ".join(_figure(floor, v) for v in each) if len(each) > 1 else ""
        lines.append(f"| {label} | {floor.target} | {was} | {_figure(floor, value)} | {verdict} | {runs} |")
    return [*lines, ""]


def write(results: dict[str, Any], md_path: Path, png_path: Path) -> None:
    table = medians(results)
    runs = results["runs"]
    plan = results["plan"]
    lines: list[str] = ["# Benchmarks", ""]
    add = lines.append
    quick = "**Quick mode: small N, one run — checks the harness, not a result.**" if plan["quick"] else ""
    add(f"Generated by `make bench` (`bench/run.py`); do not edit by hand. {quick}".rstrip())
    add("")
    if not results.get("complete"):
        add(f"**Incomplete run: {len(runs)} of {plan['runs']} runs finished when this file was written.**")
        add("")
    lines += floor_lines(results, before.load(md_path.parent))
    lines += setup_lines(results)
    add("## Results (jobs/s unless stated; medians)")
    add("")
    add(
        "| system | enqueue one-by-one | bulk | drain, 1 worker | 2 workers | 4 workers "
        "| pickup p50 / p95 | idle worker, queries/s | worker CPU per job (1 worker) | max RSS of a process |"
    )
    add("|---|---|---|---|---|---|---|---|---|---|")
    for system, variant, label in ROWS:
        row = table[(system, variant)]
        if row[1] is None and row[2] is None and row[4] is None:
            continue
        pick = f"{row['p50']:.0f} / {row['p95']:.0f} ms" if row.get("p50") is not None else "–"
        add(
            f"| {label} | {_fmt(row.get('one'))} | {_fmt(row.get('bulk'))} | {_fmt(row[1])} | {_fmt(row[2])} "
            f"| {_fmt(row[4])} | {pick} | {_fmt(row.get('idle_qps'), 1)} | {_fmt(row['cpu1'])} µs "
            f"| {_fmt(row['rss'])} MB |"
        )
    add("")
    add("![drain throughput](bench/benchmarks.png)")
    add("")
    add("### Ratios of the drains (medians of the ratios measured within each run)")
    add("")
    add("| comparison | 1 worker | 2 workers | 4 workers |")
    add("|---|---|---|---|")
    for top, bottom, label in COMPARISONS:
        cells = [_ratio(floors.drain_ratio(runs, top, bottom, w)) for w in WORKERS]
        if any(c != "–" for c in cells):
            add(f"| {label} | {' | '.join(cells)} |")
    cells = [_ratio(floors.peer_ratio(runs, ATOMIC, w)) for w in WORKERS]
    add(f"| atomic mode / fastest peer of the run | {' | '.join(cells)} |")
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
    add("### Every drain (jobs/s per run)")
    add("")
    add("| system | workers | " + " | ".join(f"run {i + 1}" for i in range(len(runs))) + " |")
    add("|---|---|" + "---|" * len(runs))
    for system, variant, label in ROWS:
        for workers in WORKERS:
            values = [rate(run, system, variant, workers) for run in runs]
            if any(v is not None for v in values):
                add(f"| {label} | {workers} | " + " | ".join(_fmt(v) for v in values) + " |")
    add("")
    add(PROFILE)
    add(METHOD)
    # The sections of make bench-scale, bench-spark and bench-history are not this run's: they
    # are carried over as they stand.
    if kept := kept_sections(md_path.read_text() if md_path.exists() else ""):
        lines.extend(["", kept])
    md_path.write_text("\n".join(lines) + "\n")
    chart([(label.replace("**", ""), table[(s, v)]) for s, v, label in ROWS], png_path)


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
        f"{_ratio(_enqueue_ratio(runs, 'one'))}; `bulk_enqueue()` / raw executemany: "
        f"{_ratio(_enqueue_ratio(runs, 'bulk'))}.",
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
