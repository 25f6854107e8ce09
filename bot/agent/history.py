"""Conversation history in SQLite: the messages, and summaries of the oldest ones.

It is the model's transcript (what the agent sends and gets back), so it lives beside the
agent; the conversation service reaches it only through `Agent.reset`. What of it goes to
the model is decided by `bot.agent.context`: the newest turns within a token budget, and a
summary (kept here, so it is written once) of the messages before them.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from bot.database import open_database

T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation TEXT NOT NULL,
    created REAL NOT NULL,
    message TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages (conversation, id);
CREATE TABLE IF NOT EXISTS summaries (
    conversation TEXT NOT NULL,
    last_id INTEGER NOT NULL,
    count INTEGER NOT NULL,
    first_created REAL NOT NULL,
    last_created REAL NOT NULL,
    text TEXT NOT NULL,
    PRIMARY KEY (conversation, last_id)
);
"""
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

    def __init__(self, path: Path) -> None:
        self._db = open_database(path, SCHEMA)
        # Held by the worker thread, not the awaiting task: a turn stopped mid-statement
        # must keep the connection until its statement is over, or the next one would run
        # beside it on the same connection.
        self._lock = threading.Lock()

    async def _call(self, statement: Callable[[], T]) -> T:
        def serially() -> T:
            with self._lock:
                return statement()

        return await asyncio.to_thread(serially)

    async def load(self, conversation: str, after: int = 0) -> list[Stored]:
        """The conversation's messages after id `after`, oldest first (the newest WINDOW)."""
        rows = await self._call(
            lambda: self._db.execute(
                "SELECT id, created, message FROM messages WHERE conversation = ? AND id > ? "
                "ORDER BY id DESC LIMIT ?",
                (conversation, after, WINDOW),
            ).fetchall()
        )
        return [Stored(id, created, json.loads(raw)) for id, created, raw in reversed(rows)]

    async def append(self, conversation: str, messages: list[dict[str, Any]]) -> None:
        now = time.time()
        rows = [(conversation, now, json.dumps(m)) for m in messages]
        # The cursor is closed in the worker: a cursor freed later, on the loop's thread,
        # would reset its statement beside another thread's.
        await self._call(
            lambda: self._db.executemany(
                "INSERT INTO messages (conversation, created, message) VALUES (?, ?, ?)",
                rows,
            ).close()
        )

    async def summary(self, conversation: str) -> Summary | None:
        """The summary that covers the most messages, if one was written."""
        row = await self._call(
            lambda: self._db.execute(
                "SELECT last_id, count, first_created, last_created, text FROM summaries "
                "WHERE conversation = ? ORDER BY last_id DESC LIMIT 1",
                (conversation,),
            ).fetchone()
        )
        return None if row is None else Summary(*row)

    async def keep_summary(self, conversation: str, summary: Summary) -> None:
        """Store a summary; the ones it replaces are removed."""
        await self._call(lambda: self._keep_summary(conversation, summary))

    def _keep_summary(self, conversation: str, summary: Summary) -> None:
        with self._db:
            self._db.execute("BEGIN")
            self._db.execute(
                "DELETE FROM summaries WHERE conversation = ? AND last_id <= ?",
                (conversation, summary.last_id),
            )
            self._db.execute(
                "INSERT INTO summaries VALUES (?, ?, ?, ?, ?, ?)",
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
        with self._db:
            self._db.execute("BEGIN")
            self._db.execute("DELETE FROM messages WHERE conversation = ?", (conversation,))
            self._db.execute("DELETE FROM summaries WHERE conversation = ?", (conversation,))

    def close(self) -> None:
        self._db.close()
