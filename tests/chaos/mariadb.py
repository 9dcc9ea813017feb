"""A private, throw-away MariaDB server for the chaos suite.

The suite stops, crashes and restarts its database server, so it must own one: it never
touches a shared server. ``PrivateMariaDB`` creates a fresh data directory with
``mariadb-install-db`` (Debian's ``mariadb-server`` package), runs ``mariadbd`` on a free
local port, and stops (SIGTERM), crashes (SIGKILL) and starts it again on the same data.

For the many-hosts harness (``tests/chaos/netns``) it runs inside a network namespace
(``launcher=["ip", "netns", "exec", NS]``) and listens on that namespace's address
(``bind_address``); the suite itself then talks to it over its unix socket (``admin_url``),
which no network namespace or partition affects.

Two accounts exist: ``root`` (the suite: publishers, admin actions, purge, checks) and
``chaos_worker`` (every ``runqueue`` process), so that ``KILL CONNECTION`` can pick the
workers' sessions out of ``information_schema.processlist``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from urllib.parse import quote

WORKER_USER = "chaos_worker"


def find_binary(*names: str) -> str | None:
    for name in names:
        for folder in (*os.environ.get("PATH", "").split(os.pathsep), "/usr/sbin", "/usr/bin"):
            path = Path(folder) / name
            if path.is_file() and os.access(path, os.X_OK):
                return str(path)
    return None


def free_port(preferred: int = 3307) -> int:
    for port in (preferred, 0):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return sock.getsockname()[1]
    raise RuntimeError("no free local port")


class PrivateMariaDB:
    def __init__(
        self,
        base: Path,
        port: int | None = None,
        bind_address: str = "127.0.0.1",
        launcher: list[str] | None = None,
        extra_args: list[str] | None = None,
    ) -> None:
        self.base = Path(base)
        self.bind_address = bind_address
        self.launcher = list(launcher or [])
        self.extra_args = list(extra_args or [])
        self.datadir = self.base / "data"
        self.socket = self.base / "mariadb.sock"
        self.log = self.base / "mariadbd.log"
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None
        self.mariadbd = find_binary("mariadbd", "mysqld")
        self.install_db = find_binary("mariadb-install-db", "mysql_install_db")
        self.as_root = os.geteuid() == 0

    @property
    def available(self) -> bool:
        return bool(self.mariadbd and self.install_db)

    def url(self, user: str = "root", name: str = "chaos_dbqueue") -> str:
        return f"mysql://{user}@{self.bind_address}:{self.port}/{name}"

    def admin_url(self, name: str = "chaos_dbqueue") -> str:
        """root over the unix socket: reachable from any network namespace."""
        return f"mysql://root@{quote(str(self.socket), safe='')}/{name}"

    # -- lifecycle -------------------------------------------------------------------------

    def create(self) -> None:
        """A fresh data directory (whatever was there is removed)."""
        if not self.available:
            raise RuntimeError("mariadbd / mariadb-install-db not found: apt-get install mariadb-server")
        if self.base.exists():
            shutil.rmtree(self.base)
        self.base.mkdir(parents=True)
        user = ["--user=mysql"] if self.as_root else []
        if self.as_root:
            shutil.chown(self.base, "mysql", "mysql")
        subprocess.run(
            [
                self.install_db,
                *user,
                f"--datadir={self.datadir}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self.start()
        self.sql(
            f"CREATE USER IF NOT EXISTS {WORKER_USER}@'%';"
            f"CREATE USER IF NOT EXISTS {WORKER_USER}@'localhost';"
            f"GRANT ALL ON *.* TO {WORKER_USER}@'%';"
            f"GRANT ALL ON *.* TO {WORKER_USER}@'localhost';"
            "CREATE USER IF NOT EXISTS root@'%'; GRANT ALL ON *.* TO root@'%' WITH GRANT OPTION;"
            "CREATE DATABASE IF NOT EXISTS chaos_dbqueue CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;"
        )

    def start(self, timeout: float = 60) -> float:
        """Start the server on the existing data; return seconds until it answered."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        started = time.monotonic()
        user = ["--user=mysql"] if self.as_root else []
        self.proc = subprocess.Popen(
            [
                *self.launcher,
                self.mariadbd,
                "--no-defaults",
                *user,
                f"--datadir={self.datadir}",
                f"--socket={self.socket}",
                f"--port={self.port}",
                f"--bind-address={self.bind_address}",
                f"--pid-file={self.base / 'mariadbd.pid'}",
                f"--log-error={self.log}",
                "--skip-log-bin",
                "--innodb-buffer-pool-size=256M",
                # Commits survive a mariadbd crash (the OS keeps the log); only an OS crash
                # could lose the last second, which this suite does not simulate.
                "--innodb-flush-log-at-trx-commit=2",
                "--innodb-lock-wait-timeout=10",
                "--max-connections=500",
                "--skip-name-resolve",
                "--character-set-server=utf8mb4",
                "--collation-server=utf8mb4_unicode_ci",
                *self.extra_args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        while time.monotonic() - started < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mariadbd exited with {self.proc.returncode}; see {self.log}")
            if self.ping():
                return time.monotonic() - started
            time.sleep(0.1)
        raise RuntimeError(f"mariadbd did not answer within {timeout}s; see {self.log}")

    def stop(self, crash: bool = False, timeout: float = 60) -> None:
        """SIGTERM (clean shutdown) or SIGKILL (crash, InnoDB recovers on start)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGKILL if crash else signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.base, ignore_errors=True)

    # -- queries ---------------------------------------------------------------------------

    def ping(self) -> bool:
        try:
            import MySQLdb

            conn = MySQLdb.connect(unix_socket=str(self.socket), user="root", connect_timeout=2)
        except Exception:  # noqa: BLE001 - not up yet, whatever the reason
            return False
        conn.close()
        return True

    def sql(self, statements: str) -> None:
        import MySQLdb

        conn = MySQLdb.connect(unix_socket=str(self.socket), user="root", connect_timeout=5)
        try:
            cursor = conn.cursor()
            for statement in filter(None, (s.strip() for s in statements.split(";"))):
                cursor.execute(statement)
            conn.commit()
        finally:
            conn.close()
