"""The one dialect the stores write, on both engines: `?` placeholders beside literal `%`
and `?` in strings, transactions that undo everything on an error, and the column types
that keep epoch seconds and 64-bit counts whole."""

from __future__ import annotations

import pytest

from bot.database import Database, Databases, Migrations, open_store
from bot.database.sql import for_psycopg, statements

TABLE = Migrations(
    "dialect",
    "dialect",
    ("CREATE TABLE t (id {id}, at {real} NOT NULL, n {int} NOT NULL, word TEXT NOT NULL)",),
)


def test_placeholders_become_psycopgs_outside_strings_only() -> None:
    assert for_psycopg("SELECT ? || '?%' FROM t WHERE a LIKE ?") == (
        "SELECT %s || '?%%' FROM t WHERE a LIKE %s"
    )
    assert for_psycopg('SELECT "odd?name" FROM t WHERE x % 2 = ?') == (
        'SELECT "odd?name" FROM t WHERE x %% 2 = %s'
    )
    assert statements(
        "CREATE TABLE a (x {int}); CREATE TABLE b (y TEXT DEFAULT ';')", "sqlite"
    ) == [
        "CREATE TABLE a (x INTEGER)",
        "CREATE TABLE b (y TEXT DEFAULT ';')",
    ]


def test_literals_parameters_and_types_on_both_engines(databases: Databases) -> None:
    db = open_store(databases, TABLE)
    try:
        row = db.execute("SELECT ? || '%?', 7 % 3", ("100",)).one()
        assert row == ("100%?", 1)
        at, big = 1_800_000_000.123456, 2**40 + 1
        new = db.execute(
            "INSERT INTO t (at, n, word) VALUES (?, ?, ?) RETURNING id", (at, big, "a")
        ).one()
        assert new is not None
        assert db.execute("SELECT at, n FROM t WHERE id = ?", (new[0],)).rows == [(at, big)]
        with pytest.raises(RuntimeError, match="undone"):
            insert_and_delete_then_fail(db)
        assert db.execute("SELECT word FROM t ORDER BY id").rows == [("a",)]
        db.executemany(
            "INSERT INTO t (at, n, word) VALUES (?, ?, ?)", [(1.0, 1, "c"), (2.0, 2, "d")]
        )
        assert db.execute("DELETE FROM t WHERE n < ?", (3,)).rowcount == 2
    finally:
        db.close()


def insert_and_delete_then_fail(db: Database) -> None:
    with db.transaction() as session:
        session.execute("INSERT INTO t (at, n, word) VALUES (?, ?, ?)", (1.0, 1, "b"))
        session.execute("DELETE FROM t WHERE word = ?", ("a",))
        raise RuntimeError("undone")
