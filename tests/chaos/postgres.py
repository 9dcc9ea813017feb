"""A private, throw-away PostgreSQL cluster, for the runs that restart their database.

Like :mod:`tests.chaos.mariadb` for MariaDB: a run that stops or crashes its server must own
it, never the shared one on 5432. ``PrivatePostgres`` makes a fresh cluster with ``initdb``
(Debian's ``postgresql`` package: ``/usr/lib/postgresql/<version>/bin``) in the run's
folder, runs it on a free local port, and stops it cleanly (``pg_ctl stop -m fast``) or as a
crash (``-m immediate``: no checkpoint, WAL recovery on the next start) and starts it again
on the same data. As root, the cluster runs as the ``postgres`` account (``initdb`` refuses
root), the way Debian runs its own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from .mariadb import free_port

#: Where Debian puts each major version's server binaries.
BIN_ROOT = Path("/usr/lib/postgresql")


def find_bin() -> Path | None:
    """The newest installed version's ``bin`` folder with ``initdb`` and ``pg_ctl``."""
    if not BIN_ROOT.is_dir():
        return None
    versions = sorted((p for p in BIN_ROOT.iterdir() if (p / "bin" / "initdb").is_file()), key=_version)
    return versions[-1] / "bin" if versions else None


def _version(path: Path) -> tuple[int, ...]:
    return tuple(int(part) for part in path.name.split(".") if part.isdigit())


class PrivatePostgres:
    def __init__(self, base: Path, port: int | None = None) -> None:
        self.base = Path(base)
        self.datadir = self.base / "data"
        self.log = self.base / "postgres.log"
        self.port = port or free_port(5499)
        self.bin = find_bin()
        self.as_root = os.geteuid() == 0

    @property
    def available(self) -> bool:
        return self.bin is not None

    def url(self, user: str = "postgres", name: str = "chaos_dbqueue") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{name}"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        assert self.bin is not None
        command = [str(self.bin / args[0]), *args[1:]]
        if self.as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        return subprocess.run(command, check=check, capture_output=True, text=True, cwd="/")

    # -- lifecycle -------------------------------------------------------------------------

    def create(self) -> None:
        """A fresh cluster and the database ``chaos_dbqueue`` (whatever was there is removed)."""
        if not self.available:
            raise RuntimeError("initdb / pg_ctl not found: apt-get install postgresql")
        if self.base.exists():
            shutil.rmtree(self.base)
        self.base.mkdir(parents=True)
        if self.as_root:
            shutil.chown(self.base, "postgres", "postgres")
        self._run("initdb", "-D", str(self.datadir), "-A", "trust", "-U", "postgres", "-E", "UTF8")
        self.start()
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "chaos_dbqueue")

    def start(self, timeout: float = 60) -> float:
        """Start the server on the existing data; return seconds until it answered."""
        started = time.monotonic()
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.base} -c max_connections=200"
        self._run("pg_ctl", "-D", str(self.datadir), "-l", str(self.log), "-o", options, "-w", "start")
        while time.monotonic() - started < timeout:
            if self.ping():
                return time.monotonic() - started
            time.sleep(0.1)
        raise RuntimeError(f"postgres did not answer within {timeout}s; see {self.log}")

    def stop(self, crash: bool = False) -> None:
        """A clean shutdown (``-m fast``) or a crash (``-m immediate``: WAL recovery on start)."""
        if self.datadir.exists():
            self._run(
                "pg_ctl", "-D", str(self.datadir), "-m", "immediate" if crash else "fast", "stop", check=False
            )

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.base, ignore_errors=True)

    def ping(self) -> bool:
        import psycopg

        try:
            psycopg.connect(
                host="127.0.0.1", port=self.port, user="postgres", dbname="postgres", connect_timeout=2
            ).close()
        except Exception:  # noqa: BLE001 - not up yet, whatever the reason
            return False
        return True
