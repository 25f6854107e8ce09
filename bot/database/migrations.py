"""Versioned migrations: each store declares its table definitions as an ordered list of
steps; `schema_migrations` records which ones a database has, per store, and each step is
applied once, in the transaction that records it.

Version 1 of every store is its tables as they were first written (`CREATE ... IF NOT
EXISTS`), so a SQLite file from before migrations gets version 1 with its rows untouched.
On PostgreSQL several replicas may start at once: an advisory lock held for the transaction
makes one apply what is missing while the others wait, then find nothing left to do."""

from __future__ import annotations

import time
from dataclasses import dataclass

from bot.database.databases import Databases
from bot.database.engines import Database, DatabaseError, Session
from bot.database.sql import statements

LOCK_KEY = 0x63656C6C6D617465
"""pg_advisory_xact_lock's key for migrations: "cellmate" in ASCII, shared by every store."""
TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    store TEXT NOT NULL,
    version {int} NOT NULL,
    applied {real} NOT NULL,
    PRIMARY KEY (store, version)
)
"""


@dataclass(frozen=True, slots=True)
class Migrations:
    store: str
    """The name versions are recorded under."""
    database: str
    """The database it opens (on SQLite, its file): stores may share one."""
    steps: tuple[str, ...]
    """Table definitions (`;`-separated statements, with `bot.database.sql`'s types);
    step N is version N. Steps are only ever appended."""

    @property
    def latest(self) -> int:
        return len(self.steps)


def migrate(db: Database, migrations: Migrations) -> int:
    """Bring the store's tables to the latest version; how many steps that applied."""
    with db.transaction() as session:
        if db.engine == "postgresql":
            # Before anything else, the table too: two concurrent CREATE TABLE IF NOT EXISTS
            # of one table can both go ahead, and one then fails.
            session.execute("SELECT pg_advisory_xact_lock(?)", (LOCK_KEY,))
        for statement in statements(TABLE, db.engine):
            session.execute(statement)
        current = _version(session, migrations.store)
        if current > migrations.latest:
            raise DatabaseError(_newer(migrations, current))
        for version in range(current + 1, migrations.latest + 1):
            for statement in statements(migrations.steps[version - 1], db.engine):
                session.execute(statement)
            session.execute(
                "INSERT INTO schema_migrations (store, version, applied) VALUES (?, ?, ?)",
                (migrations.store, version, time.time()),
            )
    return migrations.latest - current


def version(db: Database, store: str) -> int:
    """The store's version in `db` (0: none applied), read without changing anything."""
    found = db.execute(_TABLES[db.engine], ("schema_migrations",)).one()
    if found is None:
        return 0
    return _version(db, store)


def open_store(where: Databases, migrations: Migrations) -> Database:
    """The store's database, its tables at the latest version."""
    db = where.open(migrations.database)
    try:
        migrate(db, migrations)
    except BaseException:
        db.close()
        raise
    return db


def _version(session: Session, store: str) -> int:
    row = session.execute(
        "SELECT MAX(version) FROM schema_migrations WHERE store = ?", (store,)
    ).one()
    return 0 if row is None or row[0] is None else int(row[0])


def _newer(migrations: Migrations, current: int) -> str:
    return (
        f"the {migrations.store} tables are at version {current}, newer than this bot's "
        f"{migrations.latest}: a newer Cellmate migrated them; run that version"
    )


_TABLES = {
    "sqlite": "SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?",
    "postgresql": "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
    "AND tablename = ?",
}
