"""The fault table's rows (issue #21, "How we will know"). Each runs on a database of its own,
with ``rows`` good rows in each of two models (``HostileJob``: lease mode, ``HostileAtomicJob``:
atomic mode) and the fault, under real ``manage.py runqueue`` processes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Scenario:
    key: str
    title: str
    server: str  # "mariadb" or "postgresql"
    poison: str | None = None  # HostileBase action of one poison row per model, first in claim order
    deep_json: bool = False  # the poison row's JSON is nested past what Python's decoder takes
    read_only: bool = False  # the database refuses writes for a few seconds mid-run
    concurrency: int = 4

    @property
    def label(self) -> str:
        return f"{self.key}-{self.server}"


#: Faults carried by a row, which run on either server.
ROW_FAULTS = (
    ("a", "poison row: os._exit(70)", "crash"),
    ("b", "poison row: segfault (ctypes.string_at(0))", "segfault"),
    ("c1", "poison row: closes its connection (connection.connection.close())", "close-connection"),
    ("c2", "poison row: its session killed by the server (KILL / pg_terminate_backend)", "kill-session"),
    ("e1", "leaked transaction: atomic() entered, never left", "leak-atomic"),
    ("e2", "leaked transaction: set_autocommit(False) left off", "leak-autocommit"),
    ("e3", "leaked transaction: raw BEGIN", "leak-begin"),
)


def all_scenarios(postgresql_too: bool = False) -> list[Scenario]:
    row_servers = ("mariadb", "postgresql") if postgresql_too else ("mariadb",)
    scenarios = [Scenario("0", "no fault (baseline drain time)", "mariadb")]
    for server in row_servers:
        scenarios += [Scenario(key, title, server, poison=action) for key, title, action in ROW_FAULTS]
    scenarios += [
        Scenario(
            "d", "deep JSON (12,000 levels) in a row's JSONField", "postgresql", poison="ok", deep_json=True
        ),
        Scenario(
            "d", "deep JSON (12,000 levels) in a row's JSONField", "mariadb", poison="ok", deep_json=True
        ),
        Scenario("f", "read-only database for 4 s mid-run (SET GLOBAL read_only)", "mariadb", read_only=True),
        Scenario(
            "f",
            "read-only database for 4 s mid-run (default_transaction_read_only, sessions ended)",
            "postgresql",
            read_only=True,
        ),
        Scenario("g", "100 worker processes (--concurrency 100)", "mariadb", concurrency=100),
    ]
    return scenarios


def pick(scenarios: list[Scenario], only: str | None) -> list[Scenario]:
    """``only``: comma-separated keys or labels (``a,f-postgresql``); None: all."""
    if not only:
        return scenarios
    wanted = {item.strip() for item in only.split(",") if item.strip()}
    chosen = [s for s in scenarios if s.key in wanted or s.label in wanted]
    unknown = wanted - {s.key for s in chosen} - {s.label for s in chosen}
    if unknown:
        raise SystemExit(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    return chosen
