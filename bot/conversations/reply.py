"""What a front end implements to show one turn: the `Reply` protocol.

The conversation service drives it: `queued` (perhaps), `start`, the turn's events through
`__call__`, then `finish`; or `refused` / `failed` instead, so every message gets exactly one
answer. The keys name the turn's Stop and Re-run controls, for the front end's buttons.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Protocol

from bot.events import TurnEvent


class Reply(Protocol):
    async def queued(self, stop: str, text: str) -> None:
        """The turn waits behind the person's earlier one; `stop` can cancel it."""

    async def start(self, stop: str) -> None:
        """The turn begins; `stop` names its Stop control."""

    def __call__(self, event: TurnEvent) -> Awaitable[None] | None:
        """One event of the turn (the agent's emit)."""

    async def finish(self, rerun: str | None, notices: Sequence[str]) -> None:
        """The answer; `rerun` names a Re-run control for a direct run."""

    async def refused(self, text: str) -> None:
        """The turn did not start; `text` says why, for the person who asked."""

    async def failed(self, text: str) -> None:
        """Something broke while answering; `text` says what."""
