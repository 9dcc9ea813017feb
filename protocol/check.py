"""Run Spin on the protocol model (protocol/queue.pml): generate the verifier, compile it, run it.

``python -m protocol.check`` runs the bounded checks that ``make test`` runs (through
tests/unit/test_protocol_model.py); ``python -m protocol.check --deep`` the deeper ones of
``make model-check``. Each line printed is one configuration: its bounds, the states stored,
the depth, the time, and the verdict. Needs ``spin`` and ``gcc`` (``make system-deps``).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

MODEL = Path(__file__).with_name("queue.pml")

#: The mutations: each a plausible mistake in the code, selected by a -D flag of the model.
MUTATIONS = {
    "MUT_OUTCOME_UNFENCED": "the outcome UPDATE without the token (WHERE pk AND state = RUNNING)",
    "MUT_RESCUE_KEEPS_TOKEN": "the rescue puts the row back READY without clearing its token",
    "MUT_RENEW_UNFENCED": "renew without the token: a renew after the lease expired and the row was "
    "taken over still succeeds",
}


@dataclass(frozen=True)
class Config:
    """One run: the model's -D bounds, and whether it checks the liveness property."""

    name: str
    defines: tuple[str, ...]
    liveness: bool = False

    def flags(self) -> list[str]:
        return [f"-D{define}" for define in self.defines] + (["-DLIVENESS"] if self.liveness else [])


@dataclass
class Result:
    config: Config
    errors: int
    states: int
    depth: int
    seconds: float
    complete: bool
    violated: str
    output: str

    def line(self) -> str:
        verdict = "ok" if self.errors == 0 else f"COUNTEREXAMPLE ({self.violated})"
        scope = "complete" if self.complete else "INCOMPLETE"
        return (
            f"{self.config.name:<42} {' '.join(self.config.flags()):<44} {self.states:>10,} states "
            f"depth {self.depth:>4} {self.seconds:6.1f} s {scope:<10} {verdict}"
        )


#: What ``make test`` checks (each well under ten seconds here).
BOUNDED = [
    Config("safety, atomic mode, 3 workers, 1 row", ("NW=3", "NR=1", "ATOMIC=1")),
    Config("safety, lease mode, 3 workers, 1 row", ("NW=3", "NR=1", "ATOMIC=0")),
    Config("safety, lease mode, 2 workers, 2 rows", ("NW=2", "NR=2", "ATOMIC=0")),
    Config("liveness, lease mode, 2 workers, 1 row", ("NW=2", "NR=1", "ATOMIC=0"), liveness=True),
    Config("liveness, atomic mode, 2 workers, 1 row", ("NW=2", "NR=1", "ATOMIC=1"), liveness=True),
]

#: What ``make model-check`` adds: more rows, workers, faults and admin actions.
DEEP = [
    *BOUNDED,
    Config("safety, atomic mode, 2 workers, 2 rows", ("NW=2", "NR=2", "ATOMIC=1")),
    Config("safety, atomic mode, 3 workers, 2 rows", ("NW=3", "NR=2", "ATOMIC=1")),
    Config("safety, lease mode, 3 workers, 2 rows", ("NW=3", "NR=2", "ATOMIC=0")),
    Config(
        "safety, atomic, 3 workers, 1 row, 2 faults+admin",
        ("NW=3", "NR=1", "ATOMIC=1", "FAULTS=2", "ADMIN=2", "FAILS=2", "MAXREN=2"),
    ),
    Config(
        "safety, lease, 3 workers, 1 row, 2 faults+admin",
        ("NW=3", "NR=1", "ATOMIC=0", "FAULTS=2", "ADMIN=2", "FAILS=2", "MAXREN=2"),
    ),
    Config("liveness, atomic mode, 3 workers, 1 row", ("NW=3", "NR=1", "ATOMIC=1"), liveness=True),
    Config("liveness, lease mode, 3 workers, 1 row", ("NW=3", "NR=1", "ATOMIC=0"), liveness=True),
]


def available() -> str | None:
    """Why the model cannot be checked here (None: it can)."""
    missing = [tool for tool in ("spin", "gcc") if shutil.which(tool) is None]
    if missing:
        return (
            f"{' and '.join(missing)} not installed "
            "(make system-deps installs them: apt-get install -y spin gcc)"
        )
    return None


def _number(pattern: str, text: str) -> int:
    found = re.search(pattern, text)
    return int(float(found.group(1))) if found else 0


def run(config: Config, timeout: float = 600, memory_mb: int = 2048) -> Result:
    """Check ``config``: safety (assertions, invalid end states) or, with ``liveness``, the
    acceptance cycles of the LTL property under weak fairness. Stops at the first error."""
    with tempfile.TemporaryDirectory(prefix="dbqueue-spin-") as folder:
        work = Path(folder)
        shutil.copy(MODEL, work / MODEL.name)
        subprocess.run(["spin", *config.flags(), "-a", MODEL.name], cwd=work, check=True, capture_output=True)
        # COLLAPSE compresses the state vector; MEMLIM stops a run that would exhaust the machine.
        # -O1: the verifiers of make test compile in half the time of -O2 and run nearly as fast.
        cflags = ["-O1", "-w", "-DCOLLAPSE", f"-DMEMLIM={memory_mb}"]
        cflags += ["-DNFAIR=3"] if config.liveness else ["-DSAFETY"]
        subprocess.run(["gcc", *cflags, "-o", "pan", "pan.c"], cwd=work, check=True, capture_output=True)
        pan = ["./pan", "-m1000000"] + (["-a", "-f"] if config.liveness else [])
        started = time.monotonic()
        done = subprocess.run(pan, cwd=work, capture_output=True, text=True, timeout=timeout)
        seconds = time.monotonic() - started
        output = done.stdout + done.stderr
        violated = re.search(r"pan:1: (.*?) \(at depth", output)
        return Result(
            config=config,
            errors=_number(r"errors: (\d+)", output),
            states=_number(r"([\d.e+]+) states, stored", output),
            depth=_number(r"depth reached (\d+)", output),
            seconds=seconds,
            complete="Search not completed" not in output,
            violated=" ".join(violated.group(1).split()) if violated else "",
            output=output,
        )


def mutant(config: Config, mutation: str) -> Config:
    return Config(f"{mutation}: {config.name}", (*config.defines, mutation), config.liveness)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deep", action="store_true", help="the deeper run of make model-check")
    args = parser.parse_args(argv)
    why = available()
    if why:
        print(why, file=sys.stderr)
        return 2
    failed = 0
    for config in DEEP if args.deep else BOUNDED:
        result = run(config, timeout=3600 if args.deep else 600)
        print(result.line(), flush=True)
        failed += result.errors > 0 or not result.complete
    for mutation in MUTATIONS:
        for config in BOUNDED[:2]:
            result = run(mutant(config, mutation))
            print(result.line(), flush=True)
            failed += result.errors == 0  # a mutation the checker misses is a failure
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
