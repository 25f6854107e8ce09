"""The bot's own SQLite files (history, quotas, policies): one way to open them."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def open_database(path: Path, schema: str) -> sqlite3.Connection:
    """Open (or create) the database at `path` with its tables. Statements commit on their
    own (no implicit transactions), and the connection may be used from worker threads:
    each store keeps its statements off each other with a lock of its own."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    # Each statement is its own transaction: in WAL mode with NORMAL sync a commit appends
    # to the log without an fsync, which took 2 to 7 ms of every turn on the event loop.
    # (A data directory on a network filesystem, where WAL cannot work, is a case for
    # PostgreSQL.)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.executescript(schema)
    return db
