"""Background runs that outlive the bot process (`background.sqlite3` on SQLite):
where a run went on, who started it, and the id its sandbox keeps it by. Where sessions
survive a restart, a shutdown leaves these runs going; the next start reads them back and
follows each to its end (bot.conversations.background)."""

from __future__ import annotations

from dataclasses import dataclass

from bot.database import Databases, Migrations, open_store

MIGRATIONS = Migrations(
    "background",
    "background",
    (
        """
        CREATE TABLE IF NOT EXISTS background_runs (
            stop_key TEXT PRIMARY KEY,
            conversation_key TEXT NOT NULL,
            owner TEXT NOT NULL,
            server TEXT NOT NULL,
            code TEXT NOT NULL,
            run_id TEXT NOT NULL,
            started {real} NOT NULL,
            max_s {real} NOT NULL
        );
        """,
    ),
)
COLUMNS = "stop_key, conversation_key, owner, server, code, run_id, started, max_s"


@dataclass(frozen=True, slots=True)
class StoredRun:
    stop_key: str
    """The key of its Stop control, kept so that a Stop posted before the restart works."""
    conversation_key: str
    """Its `ConversationKey.id`."""
    owner: str
    server: str
    code: str
    run_id: str
    """The id its sandbox keeps it by (executor `Session.keep`)."""
    started: float
    """When it started (seconds since the epoch)."""
    max_s: float
    """The longest it may take in all."""


class BackgroundStore:
    def __init__(self, where: Databases) -> None:
        self._db = open_store(where, MIGRATIONS)

    def close(self) -> None:
        self._db.close()

    def add(self, run: StoredRun) -> None:
        self._db.execute(
            f"INSERT INTO background_runs ({COLUMNS}) VALUES (?,?,?,?,?,?,?,?) "  # noqa: S608 (fixed columns)
            "ON CONFLICT (stop_key) DO UPDATE SET conversation_key = excluded.conversation_key, "
            "owner = excluded.owner, server = excluded.server, code = excluded.code, "
            "run_id = excluded.run_id, started = excluded.started, max_s = excluded.max_s",
            (
                run.stop_key,
                run.conversation_key,
                run.owner,
                run.server,
                run.code,
                run.run_id,
                run.started,
                run.max_s,
            ),
        )

    def remove(self, stop_key: str) -> None:
        self._db.execute("DELETE FROM background_runs WHERE stop_key = ?", (stop_key,))

    def of_platform(self, platform: str) -> list[StoredRun]:
        rows = self._db.execute(
            f"SELECT {COLUMNS} FROM background_runs "  # noqa: S608 (fixed columns)
            "WHERE conversation_key LIKE ? ORDER BY started",
            (f"{platform}:%",),
        ).rows
        return [
            StoredRun(str(r[0]), str(r[1]), str(r[2]), str(r[3]), str(r[4]), str(r[5]), r[6], r[7])
            for r in rows
        ]
