"""Which replica holds each session's sandbox: the seam to a ledger that the bot's replicas
share (the bot keeps it in its database), and a fake of it kept in memory.

A replica records a session when it starts one; another replica that gets a turn of that
conversation takes the record over by compare-and-set and adopts the sandbox (variables
intact) instead of starting a new one. Before a replica stops, saves, pauses or removes a
session's sandbox it releases the record, again by compare-and-set: when the record is no
longer its own, another replica took the sandbox over, and it only lets go of it.

The calls are short and blocking (a database round trip); the executor makes them in a
worker thread. Without a ledger (one process) sessions behave as they always did.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Owner:
    """Who holds a session: its sandbox and the replica (sandbox label) attached to it."""

    sandbox: str
    replica: str


class SessionOwners(Protocol):
    @property
    def replica(self) -> str:
        """This process's name in the ledger (its sandbox label)."""

    def record(self, key: str, sandbox: str) -> None:
        """This replica holds the key's session in `sandbox` (a session it started)."""

    def owner(self, key: str) -> Owner | None:
        """Who holds the key's session (None: nobody recorded it)."""

    def take(self, key: str, sandbox: str, from_replica: str) -> bool:
        """Take the key's session over from `from_replica`: True only when the ledger still
        said that replica held it in `sandbox` (one of several replicas that try wins)."""

    def give_back(self, key: str, sandbox: str, to_replica: str) -> bool:
        """Hand a session this replica took but could not attach to back to `to_replica`
        (its turn was stopped meanwhile): True when the record still named this replica and
        `sandbox`. The sandbox keeps its session for the next replica that tries."""

    def release(self, key: str, sandbox: str) -> bool:
        """Remove the record when it still says this replica holds the key in `sandbox`:
        True when it did, and the sandbox is this replica's to end; False when another
        replica took it over (or nothing names it), and it must be left running."""

    def mine(self) -> dict[str, str]:
        """The sessions this replica holds: key -> sandbox."""

    def others(self) -> set[str]:
        """The sandboxes other replicas hold, whatever their labels."""

    def named(self) -> set[str]:
        """Every sandbox the ledger names, whichever replica holds it: none of them is a
        leftover (one read, so a record that moves between replicas meanwhile is in it)."""


class MemoryOwners:
    """A ledger in this process's memory: replicas in one test share `table`."""

    def __init__(self, replica: str, table: dict[str, tuple[str, str, float]] | None = None):
        self._replica = replica
        self.table: dict[str, tuple[str, str, float]] = {} if table is None else table
        """key -> (sandbox, replica, updated)."""
        self._lock = threading.Lock()
        self.calls = 0

    def sharing(self, replica: str) -> MemoryOwners:
        """The same ledger, seen by another replica."""
        other = MemoryOwners(replica, self.table)
        other._lock = self._lock
        return other

    @property
    def replica(self) -> str:
        return self._replica

    def record(self, key: str, sandbox: str) -> None:
        with self._lock:
            self.calls += 1
            self.table[key] = (sandbox, self._replica, time.time())

    def owner(self, key: str) -> Owner | None:
        with self._lock:
            self.calls += 1
            found = self.table.get(key)
        return None if found is None else Owner(found[0], found[1])

    def take(self, key: str, sandbox: str, from_replica: str) -> bool:
        with self._lock:
            self.calls += 1
            found = self.table.get(key)
            if found is None or found[:2] != (sandbox, from_replica):
                return False
            self.table[key] = (sandbox, self._replica, time.time())
            return True

    def give_back(self, key: str, sandbox: str, to_replica: str) -> bool:
        with self._lock:
            self.calls += 1
            found = self.table.get(key)
            if found is None or found[:2] != (sandbox, self._replica):
                return False
            self.table[key] = (sandbox, to_replica, time.time())
            return True

    def release(self, key: str, sandbox: str) -> bool:
        with self._lock:
            self.calls += 1
            found = self.table.get(key)
            if found is None or found[:2] != (sandbox, self._replica):
                return False
            del self.table[key]
            return True

    def mine(self) -> dict[str, str]:
        with self._lock:
            return {k: v[0] for k, v in self.table.items() if v[1] == self._replica}

    def others(self) -> set[str]:
        with self._lock:
            return {v[0] for v in self.table.values() if v[1] != self._replica}

    def named(self) -> set[str]:
        with self._lock:
            return {v[0] for v in self.table.values()}
