"""A network cable with latency and loss, in user space: ``tc netem`` for a kernel without it.

The kernels this suite runs on may lack ``sch_netem`` (``CONFIG_NET_SCH_NETEM`` is not set on
the development machines: ``tc qdisc add ... netem`` answers "Specified qdisc kind is unknown").
So one host's link is two TAP devices joined by this process instead of a veth pair: one TAP
in the host's namespace (its ``eth0``), one in the switch's namespace (a port of the bridge).
Every Ethernet frame crossing the cable is read here, held back by the direction's delay and
dropped with the direction's loss probability, as ``netem delay D loss P`` would on that
direction's egress. The frames are the kernel's own (TCP, ARP): retransmissions, congestion
control and timeouts are real.

Run as ``ip netns exec SWITCH python -m tests.chaos.netns.wire --port NAME --host-ns NS``.
Control lines on stdin change the impairment at any time::

    up_delay_ms up_loss down_delay_ms down_loss     e.g. "100 0.01 0 0"

(up: from the host to the switch). The TAPs vanish with the process: nothing to clean up.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import random
import select
import struct
import sys
import time
from collections import deque

TUNSETIFF = 0x400454CA
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000


def open_tap(name: str) -> int:
    """A TAP device called ``name`` in the calling thread's network namespace."""
    fd = os.open("/dev/net/tun", os.O_RDWR)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH22x", name.encode(), IFF_TAP | IFF_NO_PI))
    os.set_blocking(fd, False)
    return fd


class Direction:
    """One direction of the cable: frames in flight, due times, the impairment."""

    def __init__(self, source: int, target: int, seed: int) -> None:
        self.source, self.target = source, target
        self.delay = 0.0
        self.loss = 0.0
        self.rng = random.Random(seed)
        self.queue: deque[tuple[float, bytes]] = deque()
        self.frames = self.dropped = 0

    def receive(self) -> None:
        while True:
            try:
                frame = os.read(self.source, 65536)
            except BlockingIOError:
                return
            self.frames += 1
            if self.loss and self.rng.random() < self.loss:
                self.dropped += 1
                continue
            self.queue.append((time.monotonic() + self.delay, frame))

    def deliver(self, now: float) -> float | None:
        """Send what is due; return when the next frame is due (None: nothing in flight)."""
        while self.queue and self.queue[0][0] <= now:
            _, frame = self.queue.popleft()
            try:
                os.write(self.target, frame)
            except (BlockingIOError, OSError):
                self.dropped += 1  # the receiving side's queue is full: a real link drops too
        return self.queue[0][0] if self.queue else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", required=True, help="the TAP in this (the switch's) namespace")
    parser.add_argument("--host-ns", required=True, help="the host's namespace (ip netns name)")
    parser.add_argument("--host-dev", default="eth0", help="the TAP's name in the host's namespace")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    switch_side = open_tap(args.port)
    with open(f"/var/run/netns/{args.host_ns}") as ns:
        os.setns(ns.fileno(), os.CLONE_NEWNET)
    host_side = open_tap(args.host_dev)
    up = Direction(host_side, switch_side, args.seed)
    down = Direction(switch_side, host_side, args.seed + 1)
    print("ready", flush=True)
    control = sys.stdin.fileno()
    while True:
        now = time.monotonic()
        due = [t for t in (up.deliver(now), down.deliver(now)) if t is not None]
        timeout = max(0.0, min(due) - time.monotonic()) if due else None
        readable, _, _ = select.select([host_side, switch_side, control], [], [], timeout)
        if host_side in readable:
            up.receive()
        if switch_side in readable:
            down.receive()
        if control in readable:
            line = sys.stdin.readline()
            if not line:
                return 0  # the harness is gone: so is the cable
            if line.strip() == "stats":
                print(f"up {up.frames} {up.dropped} down {down.frames} {down.dropped}", flush=True)
                continue
            up_delay, up_loss, down_delay, down_loss = (float(x) for x in line.split())
            up.delay, up.loss = up_delay / 1000, up_loss
            down.delay, down.loss = down_delay / 1000, down_loss
            print("ok", flush=True)


if __name__ == "__main__":
    sys.exit(main())
