"""Which replica holds each live session's sandbox, in the shared database: the ledger the
executor asks (executor/ownership.py) when a conversation's turn reaches a replica that does
not hold its session, and before a replica stops, saves, pauses or removes a sandbox.

A replica is named by its sandbox label (`CELLMATE_INSTANCE`), which no two live replicas
share: a restarted replica finds its own records again."""

from __future__ import annotations

import time
from collections.abc import Callable

from bot.database import Databases, Migrations, open_store
from executor.ownership import Owner

MIGRATIONS = Migrations(
    "session_owners",
    "owners",
    (
        """
        CREATE TABLE IF NOT EXISTS session_owners (
            session TEXT PRIMARY KEY,
            sandbox TEXT NOT NULL,
            replica TEXT NOT NULL,
            updated {real} NOT NULL
        );
        CREATE INDEX IF NOT EXISTS session_owners_by_replica ON session_owners (replica);
        """,
    ),
)


class SessionOwners:
    def __init__(
        self, where: Databases, replica: str, clock: Callable[[], float] = time.time
    ) -> None:
        self._db = open_store(where, MIGRATIONS)
        self._replica = replica
        self.clock = clock

    @property
    def replica(self) -> str:
        return self._replica

    def close(self) -> None:
        self._db.close()

    def record(self, key: str, sandbox: str) -> None:
        self._db.execute(
            "INSERT INTO session_owners (session, sandbox, replica, updated) VALUES (?,?,?,?) "
            "ON CONFLICT (session) DO UPDATE SET sandbox = excluded.sandbox, "
            "replica = excluded.replica, updated = excluded.updated",
            (key, sandbox, self._replica, self.clock()),
        )

    def owner(self, key: str) -> Owner | None:
        row = self._db.execute(
            "SELECT sandbox, replica FROM session_owners WHERE session = ?", (key,)
        ).one()
        return None if row is None else Owner(str(row[0]), str(row[1]))

    def take(self, key: str, sandbox: str, from_replica: str) -> bool:
        row = self._db.execute(
            "UPDATE session_owners SET replica = ?, updated = ? "
            "WHERE session = ? AND sandbox = ? AND replica = ? RETURNING session",
            (self._replica, self.clock(), key, sandbox, from_replica),
        ).one()
        return row is not None

    def give_back(self, key: str, sandbox: str, to_replica: str) -> bool:
        row = self._db.execute(
            "UPDATE session_owners SET replica = ?, updated = ? "
            "WHERE session = ? AND sandbox = ? AND replica = ? RETURNING session",
            (to_replica, self.clock(), key, sandbox, self._replica),
        ).one()
        return row is not None

    def release(self, key: str, sandbox: str) -> bool:
        row = self._db.execute(
            "DELETE FROM session_owners WHERE session = ? AND sandbox = ? AND replica = ? "
            "RETURNING session",
            (key, sandbox, self._replica),
        ).one()
        return row is not None

    def mine(self) -> dict[str, str]:
        rows = self._db.execute(
            "SELECT session, sandbox FROM session_owners WHERE replica = ?", (self._replica,)
        ).rows
        return {str(key): str(sandbox) for key, sandbox in rows}

    def others(self) -> set[str]:
        rows = self._db.execute(
            "SELECT sandbox FROM session_owners WHERE replica <> ?", (self._replica,)
        ).rows
        return {str(row[0]) for row in rows}

    def named(self) -> set[str]:
        rows = self._db.execute("SELECT sandbox FROM session_owners").rows
        return {str(row[0]) for row in rows}
