"""Names to addresses, once per request: the `Resolver` seam.

The proxy resolves a granted name once, checks every answer, and connects to one it
checked; it never hands the name to anything that would resolve it again.
`StaticResolver` answers from a table (tests, and names an operator pins).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

LOOKUP_TIMEOUT_S = 5.0


class Resolver(Protocol):
    async def resolve(self, name: str, port: int) -> list[str]:
        """Every address `name` has now, as text; [] when it has none."""
        ...


class SystemResolver:
    """The host's resolver (getaddrinfo), with a deadline."""

    async def resolve(self, name: str, port: int) -> list[str]:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(LOOKUP_TIMEOUT_S):
                found = await loop.getaddrinfo(
                    name, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
                )
        except (OSError, TimeoutError):
            return []
        addresses: list[str] = []
        for *_, sockaddr in found:
            if str(sockaddr[0]) not in addresses:
                addresses.append(str(sockaddr[0]))
        return addresses


class StaticResolver:
    """Answers from a table; a callable entry may answer differently each time (a test's
    rebinding server). Names not in the table have no address."""

    def __init__(
        self, table: Mapping[str, Iterable[str] | Callable[[], Iterable[str]]] | None = None
    ) -> None:
        self.table = dict(table or {})
        self.asked: list[str] = []

    async def resolve(self, name: str, port: int) -> list[str]:
        self.asked.append(name)
        entry = self.table.get(name)
        if entry is None:
            return []
        return list(entry() if callable(entry) else entry)


class PinnedResolver:
    """Names the operator pins to addresses (`--resolve NAME=ADDRESS`, like curl's), and
    the host's resolver for the rest. A pinned answer is checked like any other."""

    def __init__(self, pinned: Mapping[str, Iterable[str]], rest: Resolver) -> None:
        self.pinned = StaticResolver({name.lower(): list(found) for name, found in pinned.items()})
        self.rest = rest

    async def resolve(self, name: str, port: int) -> list[str]:
        if name.lower() in self.pinned.table:
            return await self.pinned.resolve(name.lower(), port)
        return await self.rest.resolve(name, port)
