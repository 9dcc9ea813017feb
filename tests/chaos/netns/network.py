"""A private network of namespaces on this machine: a switch, a database host, worker hosts.

::

    ns <prefix>-sw: bridge br0 ──┬── veth ── ns <prefix>-db   eth0 10.213.N.1   (mariadbd)
                                 ├── veth ── ns <prefix>-h1   eth0 10.213.N.11  (runqueue)
                                 ├── veth ── ns <prefix>-h2   eth0 10.213.N.12  (runqueue)
                                 └── wire ── ns <prefix>-h3   eth0 10.213.N.13  (runqueue)

Each host namespace has ``lo`` up and one ``eth0`` on the private /24; the switch namespace
holds the bridge and has no address at all, so nothing routes out of the network and the
machine's own namespace is not touched. Hosts named in ``wired`` are linked by a user-space
cable (``wire.py``) that can add latency and loss; the others by a veth pair.

A **partition** takes a host's port off the bridge (``nomaster``): its frames reach a port that
forwards nothing, and frames for it go nowhere. No RST, no ICMP, no carrier change on the
host: both ends see silence, as when a switch or a route between racks fails. **Heal** puts the
port back.

Names carry this process's pid (``dbqn<pid>-…``). ``Network`` is a context manager that always
deletes its namespaces (after killing what runs in them), also after Ctrl-C or SIGTERM; and a
new network first removes any left by a process that no longer exists (e.g. SIGKILLed).
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType, TracebackType

PREFIX = "dbqn"
NETNS_DIR = Path("/var/run/netns")


def missing() -> str | None:
    """Why this machine cannot run the harness (None: it can)."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    if shutil.which("ip") is None:
        return "the 'ip' command (iproute2) is not installed"
    if not Path("/dev/net/tun").exists():
        return "/dev/net/tun is missing (the slow link's user-space cable needs TAP devices)"
    probe = f"{PREFIX}{os.getpid()}-probe"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    command = ["ip", *(["-n", ns] if ns else []), *args]
    done = subprocess.run(command, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {done.stderr.strip()}")
    return done


def remove_stale() -> list[str]:
    """Delete namespaces of this harness whose creating process is gone."""
    removed = []
    for name in ip("netns", "list").stdout.split():
        match = re.fullmatch(rf"{PREFIX}(\d+)-\w+", name)
        if match and not Path(f"/proc/{match.group(1)}").exists():
            kill_inside(name)
            ip("netns", "del", name, check=False)
            removed.append(name)
    return removed


def kill_inside(ns: str) -> None:
    """SIGKILL every process in namespace ``ns`` (only ever one of this harness's)."""
    pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


class Network:
    def __init__(self, hosts: int = 3, wired: tuple[str, ...] = ("h3",), seed: int | None = None) -> None:
        self.tag = f"{PREFIX}{os.getpid()}"
        self.switch = f"{self.tag}-sw"
        self.db = f"{self.tag}-db"
        self.hosts = [f"h{i}" for i in range(1, hosts + 1)]
        self.wired = set(wired)
        third = random.Random(seed).randint(1, 254)
        self.subnet = f"10.213.{third}"
        self.db_address = f"{self.subnet}.1"
        self.wires: dict[str, subprocess.Popen] = {}
        self.partitioned: set[str] = set()
        self.created: list[str] = []
        self._old_handlers: dict[int, object] = {}

    def ns(self, host: str) -> str:
        return f"{self.tag}-{host}"

    def address(self, host: str) -> str:
        return f"{self.subnet}.{10 + self.hosts.index(host) + 1}"

    def exec_prefix(self, host: str) -> list[str]:
        """Prefix of a command run on ``host`` ('db' or a worker host)."""
        return ["ip", "netns", "exec", self.db if host == "db" else self.ns(host)]

    # -- building and tearing down ----------------------------------------------------------

    def __enter__(self) -> Network:
        # SIGTERM becomes an exception too, so the finally clauses (and __exit__) run.
        for signum in (signal.SIGTERM, signal.SIGHUP):
            self._old_handlers[signum] = signal.signal(signum, self._raise)
        try:
            self.build()
        except BaseException:
            self.destroy()
            raise
        return self

    def __exit__(self, kind: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.destroy()
        for signum, handler in self._old_handlers.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]

    @staticmethod
    def _raise(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    def _add_ns(self, name: str) -> None:
        ip("netns", "add", name)
        self.created.append(name)
        ip("link", "set", "lo", "up", ns=name)

    def build(self) -> None:
        remove_stale()
        self._add_ns(self.switch)
        ip("link", "add", "br0", "type", "bridge", ns=self.switch)
        ip("link", "set", "br0", "up", ns=self.switch)
        for host, address in (("db", self.db_address), *((h, self.address(h)) for h in self.hosts)):
            ns = self.db if host == "db" else self.ns(host)
            self._add_ns(ns)
            if host in self.wired:
                self._add_wire(host)
            else:
                ip("link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", ns, ns=self.switch)
            ip("link", "set", host, "master", "br0", "up", ns=self.switch)
            ip("addr", "add", f"{address}/24", "dev", "eth0", ns=ns)
            ip("link", "set", "eth0", "up", ns=ns)

    def _add_wire(self, host: str) -> None:
        proc = subprocess.Popen(
            [
                *["ip", "netns", "exec", self.switch],
                *[sys.executable, "-m", "tests.chaos.netns.wire", "--port", host, "--host-ns", self.ns(host)],
            ],
            cwd=Path(__file__).resolve().parents[3],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.wires[host] = proc
        if proc.stdout is None or proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the user-space cable of {host} did not start")

    def destroy(self) -> None:
        for proc in self.wires.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for name in reversed(self.created):
            kill_inside(name)
        deadline = time.monotonic() + 10
        for name in reversed(self.created):
            # A namespace's devices go once nothing runs in it any more.
            while ip("netns", "del", name, check=False).returncode != 0 and time.monotonic() < deadline:
                time.sleep(0.1)
        self.created.clear()

    # -- faults -------------------------------------------------------------------------------

    def partition(self, host: str) -> None:
        """Cut ``host`` off: its switch port forwards nothing in either direction."""
        ip("link", "set", host, "nomaster", ns=self.switch)
        self.partitioned.add(host)

    def heal(self, host: str) -> None:
        ip("link", "set", host, "master", "br0", ns=self.switch)
        self.partitioned.discard(host)

    def impair(self, host: str, delay_ms: float = 0, loss: float = 0, both_ways: bool = False) -> None:
        """As ``tc qdisc add dev eth0 root netem delay <delay_ms>ms loss <loss>`` on ``host``:
        frames it sends wait ``delay_ms`` and are lost with probability ``loss``
        (``both_ways``: frames to it as well)."""
        back = (delay_ms, loss) if both_ways else (0, 0)
        self._control(host, f"{delay_ms} {loss} {back[0]} {back[1]}")

    def wire_stats(self, host: str) -> dict[str, int]:
        words = self._control(host, "stats").split()
        return {
            "up_frames": int(words[1]),
            "up_dropped": int(words[2]),
            "down_frames": int(words[4]),
            "down_dropped": int(words[5]),
        }

    def _control(self, host: str, line: str) -> str:
        proc = self.wires[host]
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(line + "\n")
        proc.stdin.flush()
        return proc.stdout.readline().strip()
