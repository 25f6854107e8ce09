"""The conversation layer's side of the egress proxy, with fixed doors: what the bot's
`Conversations` answers, for a benchmark or a test that runs sandboxes without a chat."""

from __future__ import annotations

from bot.conversations.keys import ConversationKey
from executor.network_grants import Grant, Grants, Layer, parse_pattern


class FixedDoors:
    """Every conversation has the doors in `open` (HOST[:PORT] patterns); refused doors
    are kept in `refused`, and each request's verdict in `verdicts`."""

    def __init__(self, *open_doors: str) -> None:
        self.open: tuple[str, ...] = open_doors
        self.refused: list[tuple[str, int]] = []
        self.verdicts: list[str] = []

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
        self.verdicts.append(verdict)
