"""Conversation history in SQLite: survives restarts, trimmed to a budget when read.

It is the model's transcript (what the agent sends and gets back), so it lives beside the
agent; the conversation service reaches it only through `Agent.reset`.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation TEXT NOT NULL,
    created REAL NOT NULL,
    message TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages (conversation, id);
"""


class History:
    """Chat messages (OpenAI format, tool calls included) per conversation key."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.executescript(SCHEMA)
        self._lock = asyncio.Lock()

    async def load(self, conversation: str, budget_chars: int = 60_000) -> list[dict[str, Any]]:
        """The newest messages that fit the budget, starting at a user message."""
        async with self._lock:
            rows = await asyncio.to_thread(
                lambda: self._db.execute(
                    "SELECT message FROM messages WHERE conversation = ? "
                    "ORDER BY id DESC LIMIT 400",
                    (conversation,),
                ).fetchall()
            )
        kept: list[dict[str, Any]] = []
        used = 0
        for (raw,) in rows:
            used += len(raw)
            if used > budget_chars:
                break
            kept.append(json.loads(raw))
        kept.reverse()
        # A tool result or assistant reply without the user turn that led to it confuses models.
        while kept and kept[0].get("role") != "user":
            kept.pop(0)
        return kept

    async def append(self, conversation: str, messages: list[dict[str, Any]]) -> None:
        now = time.time()
        rows = [(conversation, now, json.dumps(m)) for m in messages]
        async with self._lock:
            await asyncio.to_thread(
                self._db.executemany,
                "INSERT INTO messages (conversation, created, message) VALUES (?, ?, ?)",
                rows,
            )

    async def forget(self, conversation: str) -> None:
        async with self._lock:
            await asyncio.to_thread(
                self._db.execute, "DELETE FROM messages WHERE conversation = ?", (conversation,)
            )

    def close(self) -> None:
        self._db.close()
