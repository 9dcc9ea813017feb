"""Paired measurements: two things timed back to back, in alternating turns, so that each ratio
compares the same moments of a shared, noisy machine.

``bench benchctl save-pair`` (in django_dbqueue's environment) saves new rows of a queue model
and of its twin without QueueMixin in turns; :func:`save_figures` turns what it measured over
a run into the figures of the ``save()`` floor. Plain Python: no Django, so it is unit-tested.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any


def turn_order(turn: int, first: str, second: str) -> tuple[str, str]:
    """Who goes first in ``turn``: ``first`` in even turns, ``second`` in odd ones."""
    return (first, second) if turn % 2 == 0 else (second, first)


def paired_ratios(tops: Sequence[float], bottoms: Sequence[float]) -> list[float]:
    """Each turn's ``top / bottom`` (turns where either is missing or zero are left out)."""
    return [top / bottom for top, bottom in zip(tops, bottoms, strict=True) if top and bottom]


def save_figures(measured: Iterable[Mapping[str, Any] | None]) -> dict[str, dict[str, Any]]:
    """The save() figures of one run from its save-pair measurements (one per enqueue turn).

    Each measurement maps a pair's name to ``{"n": saves per turn, "queue_s": [...],
    "plain_s": [...]}`` (seconds per turn, the queue model's and its twin's). A pair's
    figure is the median over every turn of the run of ``queue time / plain time``; the
    microseconds per save are the medians of each side's turns.
    """
    turns: dict[str, dict[str, list[float]]] = {}
    for item in measured:
        for name, pair in (item or {}).items():
            seen = turns.setdefault(name, {"ratios": [], "queue_us": [], "plain_us": []})
            seen["ratios"] += paired_ratios(pair["queue_s"], pair["plain_s"])
            seen["queue_us"] += [s * 1e6 / pair["n"] for s in pair["queue_s"]]
            seen["plain_us"] += [s * 1e6 / pair["n"] for s in pair["plain_s"]]
    return {
        name: {
            "time_ratio": statistics.median(seen["ratios"]) if seen["ratios"] else None,
            "time_ratio_each": seen["ratios"],
            "queue_us": statistics.median(seen["queue_us"]) if seen["queue_us"] else None,
            "plain_us": statistics.median(seen["plain_us"]) if seen["plain_us"] else None,
        }
        for name, seen in turns.items()
    }
