"""Charts of the dashboard, drawn as SVG on the server: no JavaScript, no charting library to
serve, and a page that prints and works behind a strict Content-Security-Policy. Every value
goes through ``format_html`` (escaped); a bar's ``<title>`` is its tooltip."""

from __future__ import annotations

from collections.abc import Sequence

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _

from .timeline import DAY_SLICE_ROWS, DAY_SLICES, OUTCOMES, SPANS, Bucket, Timeline, timeline

WIDTH, HEIGHT, TOP = 720, 150, 14
#: The admin's own palette where it has one (success green, error red).
COLOURS = {
    "succeeded": "#70bf2b",
    "retried": "#e6a23c",
    "failed": "#ba2121",
    "lost": "#888888",
    "cancelled": "#5b5b8f",
}
LINES = (("wait", "#417690"), ("run", "#9a5bc4"))


def _label(bucket: Bucket, span: str) -> str:
    return bucket.start.strftime("%H:%M" if span == "hour" else "%d %b %H:00")


def _svg(name: str, body: SafeString, axis: str, first: str, last: str, caption: str) -> SafeString:
    return format_html(
        '<svg class="dbqueue-chart" id="dbqueue-chart-{}" viewBox="0 0 {} {}" role="img" '
        'aria-label="{}" preserveAspectRatio="none" xmlns="http://www.w3.org/2000/svg">'
        '<line x1="0" y1="{}" x2="{}" y2="{}" stroke="#ccc"/>{}'
        '<text x="2" y="10" font-size="10" fill="#666">{}</text>'
        '<text x="2" y="{}" font-size="10" fill="#666">{}</text>'
        '<text x="{}" y="{}" font-size="10" fill="#666" text-anchor="end">{}</text></svg>',
        name,
        WIDTH,
        HEIGHT + 14,
        caption,
        HEIGHT,
        WIDTH,
        HEIGHT,
        body,
        axis,
        HEIGHT + 12,
        first,
        WIDTH - 2,
        HEIGHT + 12,
        last,
    )


def throughput_chart(timeline: Timeline) -> SafeString:
    """Stacked bars of outcomes per bucket."""
    buckets = timeline.buckets
    peak = max((bucket.total for bucket in buckets), default=0) or 1
    width = WIDTH / max(len(buckets), 1)
    bars = []
    for index, bucket in enumerate(buckets):
        base = float(HEIGHT)
        tip = f"{_label(bucket, timeline.span)}: " + ", ".join(
            f"{bucket.counts.get(outcome, 0)} {outcome}" for outcome in OUTCOMES
        )
        for outcome in OUTCOMES:
            n = bucket.counts.get(outcome, 0)
            if not n:
                continue
            height = (HEIGHT - TOP) * n / peak
            base -= height
            bars.append(
                (
                    _n(index * width + 0.5),
                    _n(base),
                    _n(max(width - 1, 0.5)),
                    _n(height),
                    COLOURS[outcome],
                    outcome,
                    tip,
                )
            )
    body = format_html_join(
        "",
        '<rect x="{}" y="{}" width="{}" height="{}" fill="{}" data-outcome="{}"><title>{}</title></rect>',
        bars,
    )
    first, last = _ends(buckets, timeline.span)
    caption = _("Attempts per %(bucket)s") % {"bucket": _("minute") if timeline.span == "hour" else _("hour")}
    return _svg("throughput", body, f"{caption} · {_('max')} {peak}", first, last, caption)


def latency_chart(timeline: Timeline) -> SafeString:
    """Lines of the mean pickup latency (due to claimed) and run time (claimed to outcome)."""
    buckets = timeline.buckets
    values = [getattr(bucket, name) for bucket in buckets for name, _c in LINES]
    peak = max((value for value in values if value is not None), default=0.0) or 1.0
    width = WIDTH / max(len(buckets), 1)
    lines = []
    for name, colour in LINES:
        points = " ".join(
            f"{(index + 0.5) * width:.1f},{HEIGHT - (HEIGHT - TOP) * getattr(bucket, name) / peak:.1f}"
            for index, bucket in enumerate(buckets)
            if getattr(bucket, name) is not None
        )
        if points:
            lines.append((colour, name, points))
    body = format_html_join(
        "",
        '<polyline fill="none" stroke="{}" stroke-width="2" data-series="{}" points="{}"/>',
        lines,
    )
    first, last = _ends(buckets, timeline.span)
    caption = _("Mean pickup wait and run time")
    return _svg("latency", body, f"{caption} · {_('max')} {_seconds(peak)}", first, last, caption)


def _n(value: float) -> str:
    return f"{value:.1f}"


def _ends(buckets: Sequence[Bucket], span: str) -> tuple[str, str]:
    if not buckets:
        return "", ""
    return _label(buckets[0], span), _label(buckets[-1], span)


def _seconds(value: float) -> str:
    if value >= 120:
        return f"{value / 60:.1f} min"
    return f"{value:.3g} s"


def legend() -> SafeString:
    names = {"wait": _("pickup wait"), "run": _("run")}
    items = [(o, o) for o in OUTCOMES] + [(n, names[n]) for n, _c in LINES]
    return format_html_join(" ", '<span class="dbqueue-key dbqueue-key-{}"><i></i>{}</span>', items)


def charts(label: str, using: str, span: str) -> dict[str, object]:
    """The dashboard's context for the charts of queue model ``label`` over ``span``."""
    found = timeline(label, using, span)
    return {
        "span": span,
        "spans": list(SPANS),
        "throughput": throughput_chart(found),
        "latency": latency_chart(found),
        "legend": legend(),
        "totals": [(outcome, found.total(outcome)) for outcome in OUTCOMES],
        # The day's counts of a busy queue come from a bounded sample (admin/timeline.py).
        "estimated": found.estimated,
        "sample_rows": DAY_SLICE_ROWS,
        "sample_minutes": 60 // DAY_SLICES,
    }
