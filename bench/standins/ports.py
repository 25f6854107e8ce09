"""Loopback ports for the stand-in servers and for the listeners tests start."""

from __future__ import annotations

import secrets
import socket
from pathlib import Path

LOWEST = 10_000


def ephemeral_ports() -> tuple[int, int]:
    """The range the system takes the local ports of outgoing connections from."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32_768, 60_999


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, below the ephemeral range:
    a listener that binds it a while later (a Compose stack's published port, a server that
    starts up) does not find it taken by some process's outgoing connection meanwhile."""
    low, _ = ephemeral_ports()
    for _ in range(200):
        # Not `random`'s: a test that seeds it would make every worker pick the same ports.
        port = LOWEST + secrets.randbelow(max(low, LOWEST + 1_000) - LOWEST)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as probe:  # every try taken: any port the system gives
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
