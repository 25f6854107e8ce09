"""One connection abstraction over both engines: SQLite (a file, one connection kept
behind a lock) and PostgreSQL (psycopg connections lent by a pool). Either may be used from
worker threads; every call fetches its rows before it returns, so no cursor outlives it."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from bot.database.sql import Engine, for_psycopg

Params = Sequence[Any]


class DatabaseError(RuntimeError):
    """The database could not be reached or refused a statement; the message says which."""


@dataclass(frozen=True, slots=True)
class Result:
    rows: list[tuple[Any, ...]]
    rowcount: int
    """Rows a write changed (-1 where the engine does not say)."""

    def one(self) -> tuple[Any, ...] | None:
        return self.rows[0] if self.rows else None


class Session(ABC):
    """Where statements run: the database itself (each statement on its own), or one
    transaction."""

    @abstractmethod
    def execute(self, statement: str, params: Params = ()) -> Result: ...

    @abstractmethod
    def executemany(self, statement: str, rows: Sequence[Params]) -> None: ...


class Database(Session):
    engine: Engine

    @abstractmethod
    def transaction(self) -> contextlib.AbstractContextManager[Session]:
        """Statements that take effect together or not at all; on SQLite, other writers
        wait until it ends."""

    @abstractmethod
    def close(self) -> None: ...


class _SqliteSession(Session):
    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection

    def execute(self, statement: str, params: Params = ()) -> Result:
        cursor = self._connection.execute(statement, tuple(params))
        try:
            return Result(cursor.fetchall(), cursor.rowcount)
        finally:
            cursor.close()

    def executemany(self, statement: str, rows: Sequence[Params]) -> None:
        self._connection.executemany(statement, [tuple(row) for row in rows]).close()


def _switch_to_wal(connection: sqlite3.Connection, timeout_s: float) -> None:
    """WAL mode, waiting for other processes that switch the same new file at once: SQLite
    answers "database is locked" to all but one of them without waiting (no busy handler
    for this), and the file is in WAL mode once that one is through."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(0.02)


class SqliteDatabase(Database):
    engine: Engine = "sqlite"

    def __init__(self, path: Path, timeout_s: float = 30.0) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        # Statements commit on their own (no implicit transactions); `transaction` opens
        # one explicitly. Processes sharing the file (replicas starting at once, each
        # migrating) wait up to `timeout_s` for another's write, not SQLite's 5 s default,
        # which a loaded machine's migrations outlast.
        self._connection = sqlite3.connect(
            path, timeout=timeout_s, check_same_thread=False, isolation_level=None
        )
        # In WAL mode with NORMAL sync a commit appends to the log without an fsync, which
        # took 2 to 7 ms of every turn. (A data directory on a network filesystem, where WAL
        # cannot work, is a case for PostgreSQL.)
        _switch_to_wal(self._connection, timeout_s)
        self._connection.execute("PRAGMA synchronous=NORMAL")
        self._session = _SqliteSession(self._connection)
        # Held by the worker thread that runs a statement, not by an awaiting task: a
        # task stopped mid-statement keeps the connection until the statement is over.
        self._lock = threading.Lock()

    def execute(self, statement: str, params: Params = ()) -> Result:
        with self._lock:
            return self._session.execute(statement, params)

    def executemany(self, statement: str, rows: Sequence[Params]) -> None:
        with self.transaction() as session:
            session.executemany(statement, rows)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Session]:
        with self._lock:
            # IMMEDIATE takes the write lock at once: two processes that both read before
            # writing would otherwise deadlock instead of waiting for each other.
            self._connection.execute("BEGIN IMMEDIATE")
            try:
                yield self._session
                self._connection.execute("COMMIT")
            except BaseException:
                # Also after a COMMIT that failed: the connection must not stay inside it.
                if self._connection.in_transaction:
                    self._connection.execute("ROLLBACK")
                raise

    def close(self) -> None:
        with self._lock:
            self._connection.close()


class _PostgresSession(Session):
    def __init__(self, connection: psycopg.Connection[tuple[Any, ...]]) -> None:
        self._connection = connection

    def execute(self, statement: str, params: Params = ()) -> Result:
        with self._connection.cursor() as cursor:
            cursor.execute(for_psycopg(statement), tuple(params))
            rows = cursor.fetchall() if cursor.description is not None else []
            return Result(rows, cursor.rowcount)

    def executemany(self, statement: str, rows: Sequence[Params]) -> None:
        with self._connection.cursor() as cursor:
            cursor.executemany(for_psycopg(statement), [tuple(row) for row in rows])


class PostgresDatabase(Database):
    """A store's view of the shared pool: `close` hands it back to whoever lent it."""

    engine: Engine = "postgresql"

    def __init__(
        self, pool: ConnectionPool[psycopg.Connection[tuple[Any, ...]]], release: Callable[[], None]
    ) -> None:
        self._pool = pool
        self._release = release
        self._closed = False

    def execute(self, statement: str, params: Params = ()) -> Result:
        with self._connection() as connection:
            return _PostgresSession(connection).execute(statement, params)

    def executemany(self, statement: str, rows: Sequence[Params]) -> None:
        with self.transaction() as session:
            session.executemany(statement, rows)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Session]:
        with self._connection() as connection, connection.transaction():
            yield _PostgresSession(connection)

    @contextlib.contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
        if self._closed:
            raise DatabaseError("the database was closed")
        with self._pool.connection() as connection:
            yield connection

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._release()
