"""Every request, allowed or refused, counted per owner and logged as one JSON line.

The bot reads `Audit` for `/usage` and its metrics: per owner, per `host:port` and verdict,
how many requests and how many bytes went up (to the host) and came down: the bodies of a
plain HTTP request and its answer, every byte each way through a CONNECT tunnel. Logs carry the
owner, the sandbox's address, host, port, verdict, reason and byte counts: never a path,
query, header or body, which may hold a secret.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field

log = logging.getLogger("egressproxy.audit")

UNKNOWN = "(no owner)"
"""The owner counted for a sandbox address nobody claimed."""


@dataclass(slots=True)
class Count:
    requests: int = 0
    bytes_up: int = 0
    bytes_down: int = 0


@dataclass(frozen=True, slots=True)
class Key:
    owner: str
    host: str
    port: int
    allowed: bool


@dataclass(slots=True)
class Exchange:
    """One request (or CONNECT tunnel) in flight: its bytes are added as they pass."""

    key: Key
    client: str
    kind: str
    reason: str
    started: float = field(default_factory=time.monotonic)
    bytes_up: int = 0
    bytes_down: int = 0
    done: bool = False


class Audit:
    """Counters since the proxy started, in memory (the bot exports them)."""

    def __init__(self) -> None:
        self._counts: dict[Key, Count] = {}

    def open(
        self, owner: str, client: str, host: str, port: int, allowed: bool, kind: str, reason: str
    ) -> Exchange:
        key = Key(owner, host, port, allowed)
        self._counts.setdefault(key, Count()).requests += 1
        return Exchange(key, client, kind, reason)

    def add(self, exchange: Exchange, up: int = 0, down: int = 0) -> None:
        count = self._counts[exchange.key]
        count.bytes_up += up
        count.bytes_down += down
        exchange.bytes_up += up
        exchange.bytes_down += down

    def close(self, exchange: Exchange, error: str | None = None) -> None:
        """Log the exchange once, when it ends (a refusal ends at once)."""
        if exchange.done:
            return
        exchange.done = True
        line = {
            "event": "egress",
            "owner": exchange.key.owner,
            "client": exchange.client,
            "kind": exchange.kind,
            "host": exchange.key.host,
            "port": exchange.key.port,
            "verdict": "allowed" if exchange.key.allowed else "refused",
            "reason": exchange.reason,
            "bytes_up": exchange.bytes_up,
            "bytes_down": exchange.bytes_down,
            "seconds": round(time.monotonic() - exchange.started, 3),
        }
        if error:
            line["error"] = error
        log.info(json.dumps(line, sort_keys=True))

    def counts(self, owner: str | None = None) -> dict[Key, Count]:
        """A copy of the counters, of one owner or all."""
        return {
            key: Count(c.requests, c.bytes_up, c.bytes_down)
            for key, c in self._counts.items()
            if owner is None or key.owner == owner
        }

    def totals(self, owner: str) -> dict[str, int]:
        """One owner's sums: requests allowed and refused, bytes up and down."""
        found = {"allowed": 0, "refused": 0, "bytes_up": 0, "bytes_down": 0}
        for key, count in self.counts(owner).items():
            found["allowed" if key.allowed else "refused"] += count.requests
            found["bytes_up"] += count.bytes_up
            found["bytes_down"] += count.bytes_down
        return found
