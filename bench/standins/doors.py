"""The conversation layer's side of the egress proxy, with fixed doors: what the bot's
`Conversations` answers, for a benchmark or a test that runs sandboxes without a chat; and
the host side of one instance's sandbox network, kept to the proxy's port while in use."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import docker
import docker.errors

from bot.conversations.keys import ConversationKey
from executor.egress import bridge_name, network_name
from executor.network_grants import Grant, Grants, Layer, parse_pattern

GUARD = Path(__file__).resolve().parents[2] / "scripts" / "guard-sandbox-network.sh"


@asynccontextmanager
async def guarded_network(instance: str, port: int) -> AsyncIterator[None]:
    """The host rules that keep `instance`'s sandbox bridge to `port` (the proxy's) while in
    use; afterwards the rules and the instance's sandbox network are removed."""
    bridge = bridge_name(instance)
    try:
        await asyncio.to_thread(subprocess.run, [str(GUARD), "add", str(port), bridge], check=True)
        yield
    finally:
        await asyncio.to_thread(subprocess.run, [str(GUARD), "remove", "0", bridge], check=True)
        client = docker.from_env()
        with contextlib.suppress(docker.errors.NotFound):
            client.api.remove_network(network_name(instance))
        client.close()


class FixedDoors:
    """Every conversation has the doors in `open` (HOST[:PORT] patterns); what the proxy
    refused is kept in `refused`, and every request in `traffic`."""

    def __init__(self, *open_doors: str) -> None:
        self.open: tuple[str, ...] = open_doors
        self.refused: list[tuple[str, int]] = []
        self.traffic: list[tuple[str, str, int, str, int]] = []
        """(conversation, host, port, verdict, bytes) of every request."""

    def network_grants(self, key: ConversationKey) -> Grants:
        patterns = (Grant(parse_pattern(door), Layer.OPERATOR) for door in self.open)
        return Grants(key.id, tuple(patterns))

    async def door_closed(
        self, key: ConversationKey, host: str, port: int, run: str | None = None
    ) -> object:
        self.refused.append((host, port))
        return None

    def network_traffic(
        self,
        key: ConversationKey,
        host: str,
        port: int,
        verdict: str,
        requests: int = 1,
        sent: int = 0,
    ) -> None:
        self.traffic.append((key.id, host, port, verdict, sent))
