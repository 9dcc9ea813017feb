"""The report's charts, CSV and Markdown from rows with known values: no Spark, no database
(matplotlib only), so these run in every backend's suite."""

from __future__ import annotations

import csv
import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from django_dbqueue.compat import UTC

pytest.importorskip("matplotlib")

BASE = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _rows() -> list[dict]:
    """shop.Order over minutes 0..5 (0 and 5 partial), mail.Email over 2..3 (both partial)."""
    rows = []
    for model, minutes in (("shop.Order", range(6)), ("mail.Email", range(2, 4))):
        for m in minutes:
            partial = m in (minutes[0], minutes[-1])
            done = 30 if partial else 120
            rows.append(
                {
                    "model": model,
                    "minute": _iso(BASE + timedelta(minutes=m)),
                    "partial": partial,
                    "completed": done,
                    "failed": 1,
                    "retried": 2,
                    "lost": 0,
                    **{f"{p}_p{q}": 10.0 + m + q / 100 for p in ("wait_s", "run_s") for q in (50, 95)},
                    # No job ended in minute 1: no end-to-end time there, a gap in the line.
                    **{f"e2e_s_p{q}": None if m == 1 else 50.0 + q for q in (50, 95)},
                }
            )
    return rows


def _series(ax, color: str) -> tuple[list, list]:
    """The (line, hollow markers) of one model's colour on an axis."""
    lines = [ln for ln in ax.get_lines() if ln.get_color() == color]
    joined = [ln for ln in lines if ln.get_linestyle() == "-"]
    hollow = [ln for ln in lines if ln.get_linestyle() == "None"]
    as_minutes = lambda ln: [x.minute for x in ln.get_xdata()]  # noqa: E731 - the datetimes plotted
    return [as_minutes(ln) for ln in joined], [as_minutes(ln) for ln in hollow]


def _overlaps(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


@pytest.mark.parametrize("figure", ["throughput_figure", "latency_figure"])
def test_charts_start_at_zero_keep_partial_minutes_apart_and_the_legend_off_the_plots(figure):
    from django_dbqueue.spark import charts

    fig = getattr(charts, figure)(_rows())
    fig.draw_without_rendering()
    axes = fig.get_axes()
    assert len(axes) == (2 if figure == "throughput_figure" else 3)
    for ax in axes:
        assert ax.get_ylim()[0] == 0
        assert ax.get_ylim()[1] > 0
        # Orders are C0 (models sorted: mail.Email C0, shop.Order C1).
        joined, hollow = _series(ax, "C1")
        assert joined and all(minutes == [1, 2, 3, 4] for minutes in joined)
        assert hollow and all(minutes == [0, 5] for minutes in hollow)
        joined, hollow = _series(ax, "C0")
        assert all(minutes == [] for minutes in joined)
        assert all(minutes == [2, 3] for minutes in hollow)
    (legend,) = fig.legends
    box = legend.get_window_extent()
    assert not any(_overlaps(box, ax.get_window_extent()) for ax in axes)
    labels = [t.get_text() for t in legend.get_texts()]
    assert labels[:2] == ["mail.Email", "shop.Order"]
    assert labels[-1] == "partial first/last minute (not joined)"


def test_throughput_of_buckets_is_per_minute_and_says_so():
    from django_dbqueue.spark.charts import throughput_figure

    fig = throughput_figure(_rows(), bucket=30)
    done = fig.get_axes()[0]
    order_line = next(ln for ln in done.get_lines() if ln.get_color() == "C1" and ln.get_linestyle() == "-")
    assert list(order_line.get_ydata()) == [4.0] * 4  # 120 completions over a 30-minute bucket
    assert "mean per minute over 30-minute buckets" in done.get_title()
    assert fig.legends[0].get_texts()[-1].get_text() == "partial first/last 30-minute bucket (not joined)"


def test_charts_write_two_pngs(tmp_path: Path):
    from django_dbqueue.spark.charts import charts

    throughput, latency = charts(tmp_path, _rows())
    for path in (throughput, latency):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_csv_keeps_lists_as_json_cells(tmp_path: Path):
    from django_dbqueue.spark.render import write_csv

    samples = ['ValueError: "a", b | c', "line\nbreak"]
    path = write_csv(tmp_path / "e.csv", [{"model": "m", "samples": samples}], ["model", "samples"])
    with path.open() as fh:
        (row,) = list(csv.DictReader(fh))
    assert json.loads(row["samples"]) == samples


class _Report:
    def __init__(self, out: Path, summary: list[dict], errors: list[dict]) -> None:
        self.out, self.files, self.summary, self.top_errors, self.seconds = out, {}, summary, errors, 1.5


def _summary(**overrides) -> dict:
    row = {
        "model": "shop.Order", "jobs": 1_500, "attempts": 1_600, "succeeded": 1_400, "failed": 100,
        "retried": 100, "lost": 0, "cancelled": 0, "attempt_failure_rate": 0.125,
        "job_failure_rate": 100 / 1_500, "completed_per_minute": 120.0, "rate_basis": "full minutes",
        "full_minutes": 3, "window_s": 209.5, "wait_from_enqueued": 0,
        **{f"{p}_p{q}": 1.0 for p in ("wait_s", "run_s", "e2e_s") for q in (50, 95, 99)},
    }  # fmt: skip
    return row | overrides


def test_markdown_states_the_rate_basis_the_definitions_and_grouped_errors(tmp_path: Path):
    from django_dbqueue.spark.render import markdown

    summary = [
        _summary(),
        _summary(model="mail.Email", rate_basis="window", full_minutes=0, window_s=108.9,
                 completed_per_minute=52.34, wait_from_enqueued=7),
        _summary(model="sync.One", rate_basis=None, full_minutes=0, window_s=0.0, completed_per_minute=None),
    ]  # fmt: skip
    errors = [
        {"model": "shop.Order", "rank": 1, "exception": "AccountClosed", "message": "account <n> closed",
         "count": 1_034, "distinct_messages": 1_034, "last_seen": "2026-01-05T12:00:10.330000Z",
         "samples": ["AccountClosed: account 201033 closed", "AccountClosed: a | b `c`"]},
    ]  # fmt: skip
    text = markdown(tmp_path / "r.md", _Report(tmp_path, summary, errors), BASE, None).read_text()
    assert (
        "| shop.Order | 1,500 | 1,600 | 1,400 | 100 | 100 | 0 | 0 | 12.5 % | 6.7 % | 120.0 | 3 full minutes |"
        in text
    )
    assert "| 52.3 | 108.9 s window (no full minute) |" in text
    assert "| - | - (one instant) |" in text
    assert "mail.Email: 7 attempts have no recorded due time" in text
    assert "Wait = claimed - due" in text and "End-to-end = finished - enqueued" in text
    assert "| shop.Order | 1,034 | AccountClosed | `account <n> closed` | 1,034 |" in text
    assert "`AccountClosed: account 201033 closed`<br>`AccountClosed: a \\| b 'c'`" in text
    assert "from 2026-01-05 12:00:00.000000 to now (UTC)" in text
