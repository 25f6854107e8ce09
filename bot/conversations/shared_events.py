"""Events and requests any of the bot's replicas has handled, in the shared database: Slack
retries an event it thinks was lost, Discord may dispatch a message again after a gateway
resume, and a captured Slack request may be sent again; each may reach another replica than
the first. The first replica to record a key handles it; the others drop it.

Kept a day (Slack retries within minutes, and refuses requests older than five); older keys
are pruned as new ones come."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from bot.database import Databases, Migrations, open_store

log = logging.getLogger(__name__)

MIGRATIONS = Migrations(
    "seen_events",
    "seen",
    (
        """
        CREATE TABLE IF NOT EXISTS seen_events (
            key TEXT PRIMARY KEY,
            seen {real} NOT NULL
        );
        CREATE INDEX IF NOT EXISTS seen_events_by_age ON seen_events (seen);
        """,
    ),
)
KEEP_S = 24 * 3600.0
PRUNE_EVERY = 500
"""Records between prunings: a prune is one indexed DELETE."""


class SharedEvents:
    def __init__(self, where: Databases, clock: Callable[[], float] = time.time) -> None:
        self._db = open_store(where, MIGRATIONS)
        self.clock = clock
        self._since_prune = 0

    def close(self) -> None:
        self._db.close()

    def first_time(self, key: str) -> bool:
        """True for the first replica to see `key` (which records it). If the database
        cannot say, the event is handled: an answer twice is better than none."""
        now = self.clock()
        try:
            row = self._db.execute(
                "INSERT INTO seen_events (key, seen) VALUES (?, ?) "
                "ON CONFLICT (key) DO NOTHING RETURNING key",
                (key, now),
            ).one()
            self._since_prune += 1
            if self._since_prune >= PRUNE_EVERY:
                self._since_prune = 0
                self._db.execute("DELETE FROM seen_events WHERE seen < ?", (now - KEEP_S,))
        except Exception:
            log.warning("could not record event %s among the replicas", key, exc_info=True)
            return True
        return row is not None

    def forget(self, key: str) -> None:
        """Let `key` be handled again (its handling failed: the platform's retry is taken)."""
        try:
            self._db.execute("DELETE FROM seen_events WHERE key = ?", (key,))
        except Exception:
            log.warning("could not forget event %s", key, exc_info=True)
