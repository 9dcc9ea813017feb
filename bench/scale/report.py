# ruff: noqa: RUF001 - the tables are typeset for BENCHMARKS.md (multiplication signs, en dashes)
"""The scale benchmark's results as Markdown: one block per database server in BENCHMARKS.md's
section "Scale: 10 million rows", between markers, so a run on one server replaces only its own
block (``make bench`` keeps the section: bench/report.py carries it over)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

HEADING = "## Scale: 10 million rows"
INTRO = """
`make bench-scale` (`bench/scale/`, run alone on the machine): the example shop's `Order`
(QueueMixin, its `OrderAdmin` as shipped) with 10,000,000 orders of 5,000 customers spread over 30
days (97% succeeded, 1% failed, 0.4% cancelled, 0.5% idle, 1% ready of which half scheduled in the
next day, 0.1% running), 10,000,000 attempt-history rows and 1,000,000 finished messages, in a
database `scale_big`; beside it `scale_empty` holds only the same ready, scheduled and running
orders (110,000; nothing finished). Both are built with INSERT … SELECT and dropped at the end.
The two tables are measured in turn, round by round; "ratio" is 10M / empty (for a time, above 1 is
slower; for a rate, below 1 is slower). Medians.
"""


def ms(value: float) -> str:
    return f"{value:,.0f} ms" if value >= 10 else f"{value:.1f} ms"


def block(
    meta: dict[str, Any],
    ops: list[dict[str, Any]],
    pages: list[dict[str, Any]],
    actions: list[dict[str, Any]],
    purge: dict[str, Any] | None,
) -> str:
    out = [
        f"### {meta['server']}",
        "",
        f"* Run: {meta['started']} → {meta['ended']} (UTC), commit {meta['commit']}; {meta['machine']}.",
        f"* Load average (1 / 5 / 15 min): {meta['load_start']} at the start, {meta['load_end']} at the end.",
        f"* Command: `{meta['command']}`; build {meta['build_s']:.0f} s.",
        *([f"* {meta['note']}"] if meta.get("note") else []),
        "",
        "| operation | 10M rows | empty table | ratio | target | met? |",
        "|---|---:|---:|---:|---|---|",
    ]
    for row in ops:
        unit = row["unit"]
        fmt = (lambda v: f"{v:,.0f} rows/s") if unit == "rows/s" else ms
        target = "≤ 1.5×" if "claim(" in row["what"] else "–"
        met = ("yes" if row["ratio"] <= 1.5 else "**no**") if target != "–" else ""
        ratio = row["ratio"] if unit != "rows/s" else row["big"] / row["empty"]
        out.append(
            f"| {row['what']} | {fmt(row['big'])} | {fmt(row['empty'])} | {ratio:.2f}× | {target} | {met} |"
        )
    out += [
        "",
        "Admin pages (Django test client, whole requests, superuser): the first load, then the median of "
        f"{meta['repeat']} loads after a warm-up, the statements' own time and this process's CPU time "
        "(medians: on a loaded machine the wall time also counts waiting for a core). Target < 500 ms.",
        "",
        "| page | first | median | SQL | CPU | queries | met? |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for page in pages:
        met = "yes" if max(page["first"], page["median"]) < 500 else "**no**"
        out.append(
            f"| {page['what']} | {ms(page['first'])} | {ms(page['median'])} | {ms(page['sql'])} | "
            f"{ms(page['cpu'])} | "
            f"{page['queries']} | {met} |"
        )
    out += ["", "| bulk action | rows | confirmation page | action | met? |", "|---|---:|---:|---:|---|"]
    for act in actions:
        met = "yes" if max(act["page"], act["action"]) < 500 else "**no**"
        page = ms(act["page"]) if act["page"] else "–"
        out.append(f"| {act['what']} | {act['rows']:,} | {page} | {ms(act['action'])} | {met} |")
    if purge:
        before, during = purge["before"], purge["during"]
        slow = during["max"] / before["p50"] if before["p50"] else 0
        out += [
            "",
            f"Purge while 4 `runqueue` workers drain: `purgequeue django_dbqueue.Message --older-than 30d` "
            f"deleted the finished messages in {purge['purge_s']:.0f} s "
            f"(`{purge['purge_out'].replace(chr(10), '; ')}`); "
            "the workers "
            f"drained a backlog of messages meanwhile ({purge['backlog_left']:,} still ready when the purge "
            "ended). A claim is its locking SELECT and its UPDATE, timed by Django's statement log inside "
            "the workers.",
            "",
            "| claims of the 4 workers | claims | p50 | p95 | max |",
            "|---|---:|---:|---:|---:|",
            f"| before the purge ({meta['baseline']:.0f} s) | {before['n']:,} | {ms(before['p50'])} | "
            f"{ms(before['p95'])} | {ms(before['max'])} |",
            f"| during the purge | {during['n']:,} | {ms(during['p50'])} | {ms(during['p95'])} | "
            f"{ms(during['max'])} |",
            "",
            f"Slowest claim during the purge / median before: {slow:.1f}× (target ≤ 2×: "
            f"{'met' if slow <= 2 else '**missed**'}; p95 during / median before: "
            f"{during['p95'] / before['p50'] if before['p50'] else 0:.1f}×). "
            "Deadlocks and lock wait timeouts "
            f"in the workers' and the purge's logs: {purge['log_conflicts']}; server counters over the run: "
            f"{', '.join(f'{k} +{v}' for k, v in purge['server'].items())}"
            + (
                f"; InnoDB reports a new deadlock at {purge['innodb_new_deadlock']}"
                if purge["innodb_new_deadlock"]
                else "; no new deadlock in `SHOW ENGINE INNODB STATUS`"
                if "Innodb_deadlocks" in purge["server"]
                else ""
            )
            + ".",
        ]
    return "\n".join(out)


def write(path: Path, vendor: str, text: str) -> None:
    """Replace this server's block in ``path``'s scale section (made if missing)."""
    begin, end = f"<!-- scale:{vendor} -->", f"<!-- /scale:{vendor} -->"
    content = path.read_text() if path.exists() else ""
    if HEADING not in content:
        content = content.rstrip("\n") + f"\n\n{HEADING}\n{INTRO}"
    wrapped = f"{begin}\n{text}\n{end}"
    if begin in content:
        content = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: wrapped, content, flags=re.S)
    else:
        content = content.rstrip("\n") + f"\n\n{wrapped}\n"
    path.write_text(content if content.endswith("\n") else content + "\n")
