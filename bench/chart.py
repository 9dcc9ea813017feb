"""The drain-throughput chart of BENCHMARKS.md (bench/benchmarks.png)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

WORKERS = (1, 2, 4)


def chart(labelled: list[tuple[str, dict[Any, Any]]], path: Path) -> None:
    """A horizontal bar per system and worker count (log scale); rows without a 1-worker rate
    are left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [(label, row) for label, row in labelled if row.get(1) is not None]
    fig, ax = plt.subplots(figsize=(10, 0.55 * len(rows) + 1.5))
    height = 0.26
    colors = {1: "#9ecae1", 2: "#4292c6", 4: "#08519c"}
    for index, (_, row) in enumerate(reversed(rows)):
        for offset, workers in zip((-height, 0, height), WORKERS, strict=True):
            value = row.get(workers)
            if value:
                ax.barh(
                    index + offset,
                    value,
                    height=height,
                    color=colors[workers],
                    label=f"{workers} worker{'s' if workers > 1 else ''}" if index == 0 else None,
                )
                ax.text(value * 1.05, index + offset, f"{value:,.0f}", va="center", fontsize=7)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([label for label, _ in reversed(rows)], fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("drain throughput, no-op jobs/s (log scale, median)")
    ax.set_title("Draining a backlog on MariaDB: django_dbqueue, peers, raw-SQL loops")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
