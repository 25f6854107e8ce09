"""Conversation history in the bot's database: the messages, and summaries of the oldest ones.

It is the model's transcript (what the agent sends and gets back), so it lives beside the
agent; the conversation service reaches it only through `Agent.reset`. What of it goes to
the model is decided by `bot.agent.context`: the newest turns within a token budget, and a
summary (kept here, so it is written once) of the messages before them.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from bot.database import Databases, Migrations, open_store

T = TypeVar("T")

MIGRATIONS = Migrations(
    "history",
    "history",
    (
        """
        CREATE TABLE IF NOT EXISTS messages (
            id {id},
            conversation TEXT NOT NULL,
            created {real} NOT NULL,
            message TEXT NOT NULL
        );
        CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages (conversation, id);
        CREATE TABLE IF NOT EXISTS summaries (
            conversation TEXT NOT NULL,
            last_id {int} NOT NULL,
            count {int} NOT NULL,
            first_created {real} NOT NULL,
            last_created {real} NOT NULL,
            text TEXT NOT NULL,
            PRIMARY KEY (conversation, last_id)
        );
        """,
    ),
)
WINDOW = 2000
"""Messages read at most per turn (after the summary); older ones need a summary anyway."""


@dataclass(frozen=True, slots=True)
class Stored:
    id: int
    created: float
    message: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Summary:
    """What the model wrote about every message of a conversation up to `last_id`."""

    last_id: int
    count: int
    first_created: float
    last_created: float
    text: str


class History:
    """Chat messages (OpenAI format, tool calls included) per conversation key."""

    def __init__(self, where: Databases) -> None:
        self._db = open_store(where, MIGRATIONS)

    async def _call(self, statement: Callable[[], T]) -> T:
        # The database keeps statements off each other in the worker thread: a turn stopped
        # mid-statement leaves it to finish there.
        return await asyncio.to_thread(statement)

    async def load(self, conversation: str, after: int = 0) -> list[Stored]:
        """The conversation's messages after id `after`, oldest first (the newest WINDOW)."""
        rows = await self._call(
            lambda: (
                self._db.execute(
                    "SELECT id, created, message FROM messages WHERE conversation = ? AND id > ? "
                    "ORDER BY id DESC LIMIT ?",
                    (conversation, after, WINDOW),
                ).rows
            )
        )
        return [Stored(id, created, json.loads(raw)) for id, created, raw in reversed(rows)]

    async def append(self, conversation: str, messages: list[dict[str, Any]]) -> None:
        now = time.time()
        rows = [(conversation, now, json.dumps(m)) for m in messages]
        await self._call(
            lambda: self._db.executemany(
                "INSERT INTO messages (conversation, created, message) VALUES (?, ?, ?)",
                rows,
            )
        )

    async def summary(self, conversation: str) -> Summary | None:
        """The summary that covers the most messages, if one was written."""
        row = await self._call(
            lambda: self._db.execute(
                "SELECT last_id, count, first_created, last_created, text FROM summaries "
                "WHERE conversation = ? ORDER BY last_id DESC LIMIT 1",
                (conversation,),
            ).one()
        )
        return None if row is None else Summary(*row)

    async def keep_summary(self, conversation: str, summary: Summary) -> None:
        """Store a summary; the ones it replaces are removed."""
        await self._call(lambda: self._keep_summary(conversation, summary))

    def _keep_summary(self, conversation: str, summary: Summary) -> None:
        with self._db.transaction() as session:
            session.execute(
                "DELETE FROM summaries WHERE conversation = ? AND last_id <= ?",
                (conversation, summary.last_id),
            )
            session.execute(
                "INSERT INTO summaries (conversation, last_id, count, first_created, "
                "last_created, text) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    conversation,
                    summary.last_id,
                    summary.count,
                    summary.first_created,
                    summary.last_created,
                    summary.text,
                ),
            )

    async def forget(self, conversation: str) -> None:
        await self._call(lambda: self._forget(conversation))

    def _forget(self, conversation: str) -> None:
        with self._db.transaction() as session:
            session.execute("DELETE FROM messages WHERE conversation = ?", (conversation,))
            session.execute("DELETE FROM summaries WHERE conversation = ?", (conversation,))

    def close(self) -> None:
        self._db.close()
