"""Where the stores keep their tables: SQLite files in the data directory (the embedded
default), or one PostgreSQL database that every store, and every replica of the bot, shares.

On SQLite each store opens its own file (`history.sqlite3`, ...), as it always has. On
PostgreSQL the stores share one pool of connections, opened with the first store and closed
with the last, so that a store's `close` keeps working as it did."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from bot.database.engines import Database, DatabaseError, PostgresDatabase, SqliteDatabase
from bot.database.sql import Engine

SCHEMES = ("postgresql://", "postgres://")
POOL_SIZE = 10
"""Connections at most: the bot's statements are short, and its worker threads few."""


def url_problem(url: str) -> str | None:
    """What is wrong with a CELLMATE_DATABASE_URL, if anything ('' is SQLite)."""
    if url and not url.startswith(SCHEMES):
        return "CELLMATE_DATABASE_URL must be empty (SQLite) or postgresql://user:pass@host:port/db"
    return None


class Databases:
    def __init__(
        self, url: str = "", data_dir: Path = Path(".data"), timeout_s: float = 30.0
    ) -> None:
        if problem := url_problem(url):
            raise DatabaseError(problem)
        self.url = url
        self.data_dir = data_dir
        self.timeout_s = timeout_s
        """How long opening waits for PostgreSQL to answer, and a statement for a connection."""
        self._pool: ConnectionPool[psycopg.Connection[tuple[Any, ...]]] | None = None
        self._users = 0
        self._lock = threading.Lock()

    @classmethod
    def sqlite(cls, data_dir: Path) -> Databases:
        return cls("", data_dir)

    @property
    def engine(self) -> Engine:
        return "postgresql" if self.url else "sqlite"

    def describe(self) -> str:
        """Where the tables are, without the password."""
        if not self.url:
            return f"SQLite files in {self.data_dir}"
        return f"PostgreSQL {self.address}"

    @property
    def address(self) -> str:
        """user@host:port/database of a PostgreSQL URL (never its password)."""
        parts = urlsplit(self.url)
        user = f"{parts.username}@" if parts.username else ""
        return f"{user}{parts.hostname or 'localhost'}:{parts.port or 5432}{parts.path}"

    def open(self, name: str) -> Database:
        """The database a store named `name` keeps its tables in (on SQLite, the file
        `name`.sqlite3)."""
        if not self.url:
            return SqliteDatabase(self.data_dir / f"{name}.sqlite3", self.timeout_s)
        with self._lock:
            if self._pool is None:
                self._pool = self._connect()
            self._users += 1
            return PostgresDatabase(self._pool, self._release)

    def _connect(self) -> ConnectionPool[psycopg.Connection[tuple[Any, ...]]]:
        seconds = max(1, round(self.timeout_s))
        # One connection first, for the server's own reason when it refuses (a wrong
        # password, no such database): the pool would only retry until its timeout.
        try:
            psycopg.connect(self.url, connect_timeout=seconds).close()
        except psycopg.Error as exc:
            said = " ".join(str(exc).split())  # psycopg's hints come on lines of their own
            raise DatabaseError(f"{self.describe()}: {said}") from None
        pool: ConnectionPool[psycopg.Connection[tuple[Any, ...]]] = ConnectionPool(
            self.url,
            min_size=1,
            max_size=POOL_SIZE,
            timeout=self.timeout_s,
            # Statements commit on their own unless a store opens a transaction.
            kwargs={"autocommit": True, "connect_timeout": seconds},
            # A connection the server dropped (a restart, a failover) is replaced before it
            # is lent, not discovered by a store's statement.
            check=ConnectionPool.check_connection,
            name="cellmate",
            open=False,
        )
        try:
            pool.open(wait=True, timeout=self.timeout_s)
        except PoolTimeout:
            pool.close()
            raise DatabaseError(
                f"{self.describe()} did not answer within {self.timeout_s:g} s"
            ) from None
        return pool

    def _release(self) -> None:
        with self._lock:
            self._users = max(0, self._users - 1)
            if self._users == 0 and self._pool is not None:
                pool, self._pool = self._pool, None
                pool.close()

    def close(self) -> None:
        """Close the pool even if a store still holds it (its statements then fail)."""
        with self._lock:
            pool, self._pool, self._users = self._pool, None, 0
        if pool is not None:
            pool.close()
