"""Versioned migrations on both engines: each step applied once and in one transaction,
files from before migrations taken over with their rows, one PostgreSQL database shared by
every store, and replicas that start at once (threads, processes) applying each step once."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest

from bot.agent.history import History
from bot.conversations.background_store import BackgroundStore
from bot.conversations.keys import ConversationKey
from bot.conversations.mcp_tokens import TokenStore, digest
from bot.conversations.network import NetworkGrants, NetworkSettings
from bot.conversations.policy import Policies, PolicySettings, Scope
from bot.conversations.quotas import Quotas, QuotaSettings
from bot.conversations.schedule_store import ScheduleStore
from bot.database import Database, DatabaseError, Databases, Migrations, migrate, version
from bot.database.migrations import LOCK_KEY
from bot.ops.database_check import STORES
from tests.support import postgres as postgres_support
from tests.support.postgres import Postgres

ROOT = Path(__file__).resolve().parents[2]
TRIAL = Migrations(
    "trial",
    "trial",
    (
        "CREATE TABLE trial (n {int} NOT NULL); INSERT INTO trial (n) VALUES (1)",
        "ALTER TABLE trial ADD COLUMN label TEXT NOT NULL DEFAULT 'two'",
    ),
)
"""Steps that fail or double their row if applied twice."""
KEY = ConversationKey("discord", "g", "c", "t")


def rows(db: Database, statement: str) -> list[tuple[object, ...]]:
    return db.execute(statement).rows


def test_each_step_is_applied_once_and_again_is_a_no_op(databases: Databases) -> None:
    db = databases.open("trial")
    try:
        assert version(db, "trial") == 0
        first = Migrations("trial", "trial", TRIAL.steps[:1])
        assert migrate(db, first) == 1
        assert migrate(db, first) == 0
        assert migrate(db, TRIAL) == 1  # only the new step
        assert migrate(db, TRIAL) == 0
        assert version(db, "trial") == 2
        assert rows(db, "SELECT n, label FROM trial") == [(1, "two")]
        assert rows(db, "SELECT version FROM schema_migrations WHERE store = 'trial'") == [
            (1,),
            (2,),
        ]
        for store in STORES:
            opened = databases.open(store.database)
            try:
                assert migrate(opened, store) == store.latest
                assert migrate(opened, store) == 0
                assert version(opened, store.store) == store.latest
            finally:
                opened.close()
    finally:
        db.close()


def test_a_failed_step_leaves_the_version_before_it(databases: Databases) -> None:
    broken = Migrations(
        "trial", "trial", (TRIAL.steps[0], "CREATE TABLE half (n {int}); NOT SQL AT ALL")
    )
    db = databases.open("trial")
    try:
        with pytest.raises((sqlite3.Error, psycopg.Error)):
            migrate(db, broken)
        assert version(db, "trial") == 0  # the whole transaction: step 1 too
        migrate(db, Migrations("trial", "trial", TRIAL.steps[:1]))
        with pytest.raises((sqlite3.Error, psycopg.Error)):
            migrate(db, broken)
        assert version(db, "trial") == 1
        tables = (
            "SELECT name FROM sqlite_master WHERE name = 'half'"
            if db.engine == "sqlite"
            else "SELECT tablename FROM pg_tables WHERE tablename = 'half'"
        )
        assert rows(db, tables) == []
    finally:
        db.close()


def test_tables_newer_than_the_bot_are_refused(databases: Databases) -> None:
    db = databases.open("trial")
    try:
        migrate(db, TRIAL)
        with pytest.raises(DatabaseError, match="version 2, newer than this bot's 1"):
            migrate(db, Migrations("trial", "trial", TRIAL.steps[:1]))
    finally:
        db.close()


OLD_SCHEMAS = {
    "history": """
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
        INSERT INTO messages (conversation, created, message)
            VALUES ('discord:g:c:t', 1.5, '{"role": "user", "content": "kept"}');
    """,
    "usage": """
        CREATE TABLE IF NOT EXISTS runs (
            user TEXT NOT NULL,
            server TEXT NOT NULL,
            at REAL NOT NULL,
            seconds REAL NOT NULL
        );
        CREATE INDEX IF NOT EXISTS runs_by_user ON runs (user, at);
        CREATE INDEX IF NOT EXISTS runs_by_server ON runs (server, at);
        INSERT INTO runs VALUES ('alice', 'g', 1800000000.0, 42.0);
    """,
    "policies": """
        CREATE TABLE IF NOT EXISTS policies (
            platform TEXT NOT NULL,
            workspace TEXT NOT NULL,
            channel TEXT NOT NULL,
            mode TEXT NOT NULL,
            set_by TEXT NOT NULL,
            set_at REAL NOT NULL,
            PRIMARY KEY (platform, workspace, channel)
        );
        INSERT INTO policies VALUES ('discord', 'g', 'c', 'off', 'admin', 1.0);
        CREATE TABLE IF NOT EXISTS network_grants (
            platform TEXT NOT NULL,
            workspace TEXT NOT NULL,
            channel TEXT NOT NULL,
            conversation TEXT NOT NULL,
            host TEXT NOT NULL,
            wildcard INTEGER NOT NULL,
            ports TEXT NOT NULL,
            by TEXT NOT NULL,
            at REAL NOT NULL,
            in_run INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (platform, workspace, channel, conversation, host, wildcard, ports)
        );
        CREATE TABLE IF NOT EXISTS network_traffic (
            conversation TEXT NOT NULL,
            workspace TEXT NOT NULL,
            host TEXT NOT NULL,
            port INTEGER NOT NULL,
            verdict TEXT NOT NULL,
            requests INTEGER NOT NULL,
            bytes INTEGER NOT NULL,
            at REAL NOT NULL
        );
        CREATE INDEX IF NOT EXISTS network_traffic_at ON network_traffic (at);
        INSERT INTO network_grants VALUES ('discord', 'g', 'c', '', 'pypi.org', 0, '443', 'U1',
            1.0, 0);
    """,
    "schedules": """
        CREATE TABLE IF NOT EXISTS schedules (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            conversation TEXT NOT NULL,
            owner TEXT NOT NULL,
            server TEXT NOT NULL,
            words TEXT NOT NULL,
            cron TEXT NOT NULL,
            zone TEXT NOT NULL,
            cells TEXT NOT NULL,
            approved TEXT NOT NULL DEFAULT '',
            approved_by TEXT NOT NULL DEFAULT '',
            created REAL NOT NULL,
            next_due REAL NOT NULL,
            last_run REAL NOT NULL DEFAULT 0,
            last_text TEXT NOT NULL DEFAULT '',
            last_images TEXT NOT NULL DEFAULT '[]',
            runs INTEGER NOT NULL DEFAULT 0
        );
        CREATE INDEX IF NOT EXISTS schedules_due ON schedules (next_due);
        CREATE INDEX IF NOT EXISTS schedules_conversation ON schedules (conversation);
        INSERT INTO schedules (conversation, owner, server, words, cron, zone, cells, created,
            next_due) VALUES ('discord:g:c:t', 'alice', 'g', 'daily', '0 9 * * *', 'UTC',
            '["print(1)"]', 1.0, 2.0);
    """,
    "background": """
        CREATE TABLE IF NOT EXISTS background_runs (
            stop_key TEXT PRIMARY KEY,
            conversation_key TEXT NOT NULL,
            owner TEXT NOT NULL,
            server TEXT NOT NULL,
            code TEXT NOT NULL,
            run_id TEXT NOT NULL,
            started REAL NOT NULL,
            max_s REAL NOT NULL
        );
        INSERT INTO background_runs VALUES ('stop-1', 'discord:g:c:t', 'alice', 'g', 'x',
            'run-1', 1.0, 60.0);
    """,
    "mcp_tokens": """
        CREATE TABLE IF NOT EXISTS mcp_tokens (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            digest TEXT NOT NULL UNIQUE,
            user TEXT NOT NULL,
            name TEXT NOT NULL,
            conversation TEXT NOT NULL,
            server TEXT NOT NULL,
            created REAL NOT NULL,
            revoked REAL NOT NULL DEFAULT 0
        );
        CREATE INDEX IF NOT EXISTS mcp_tokens_user ON mcp_tokens (user);
        INSERT INTO mcp_tokens (digest, user, name, conversation, server, created)
            VALUES ('OLD_DIGEST', 'U1', 'Alice', 'discord:g:c:t', 'g', 1.0);
    """.replace("OLD_DIGEST", digest("cm_old")),
}
"""The files as the bot wrote them before migrations (their schemas, verbatim), a row each."""


async def test_files_from_before_migrations_keep_their_rows(tmp_path: Path) -> None:
    for name, script in OLD_SCHEMAS.items():
        with sqlite3.connect(tmp_path / f"{name}.sqlite3") as old:
            old.executescript(script)
        old.close()
    where = Databases.sqlite(tmp_path)
    history = History(where)
    quotas = Quotas(where, QuotaSettings())
    policies = Policies(where, PolicySettings())
    network = NetworkGrants(where, NetworkSettings(mode="allowlist"))
    schedules = ScheduleStore(where)
    background = BackgroundStore(where)
    tokens = TokenStore(where)
    try:
        assert [m.message["content"] for m in await history.load("discord:g:c:t")] == ["kept"]
        await history.append("discord:g:c:t", [{"role": "assistant", "content": "new"}])
        assert [m.id for m in await history.load("discord:g:c:t")] == [1, 2]
        assert [(u.who, u.seconds) for u in quotas.top(now=1_800_000_000.0)] == [("alice", 42.0)]
        assert policies.mode(KEY) == "off"
        assert network.grants(KEY).allows("pypi.org", 443)
        kept = schedules.get(1)
        assert kept is not None
        assert kept.cells == ["print(1)"]
        assert schedules.add("k", "o", "g", "w", "* * * * *", "UTC", [], 1.0, 1.0).id == 2
        assert [r.run_id for r in background.of_platform("discord")] == ["run-1"]
        grant = tokens.find("cm_old")
        assert grant is not None
        assert grant.user == "U1"
        assert tokens.issue("U1", "Alice", "discord:g:c:u")[1].id == 2
    finally:
        for store in (history, quotas, policies, network, schedules, background, tokens):
            store.close()
    for store in STORES:
        with sqlite3.connect(tmp_path / f"{store.database}.sqlite3") as db:
            found = db.execute(
                "SELECT version FROM schema_migrations WHERE store = ?", (store.store,)
            ).fetchall()
        db.close()
        assert found == [(1,)], store.store


def test_every_store_shares_one_postgresql_database(postgres: Postgres, postgres_url: str) -> None:
    where = Databases(postgres_url)
    opened = [
        History(where),
        Quotas(where, QuotaSettings()),
        Policies(where, PolicySettings()),
        NetworkGrants(where, NetworkSettings(mode="allowlist")),
        ScheduleStore(where),
        BackgroundStore(where),
        TokenStore(where),
    ]
    quotas, policies, tokens = opened[1], opened[2], opened[6]
    assert isinstance(quotas, Quotas)
    assert isinstance(policies, Policies)
    assert isinstance(tokens, TokenStore)
    with psycopg.connect(postgres_url) as admin:
        tables = {
            str(row[0])
            for row in admin.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        }
        stores = admin.execute("SELECT DISTINCT store FROM schema_migrations").fetchall()
    assert tables == {
        "schema_migrations",
        "messages",
        "summaries",
        "runs",
        "policies",
        "network_grants",
        "network_traffic",
        "schedules",
        "background_runs",
        "mcp_tokens",
    }
    assert {str(row[0]) for row in stores} == {store.store for store in STORES}
    # One store closing leaves the others their connections.
    opened[0].close()
    quotas.record("alice", "g", 1.0)
    policies.set(Scope.channel_of(KEY), "off", "admin")
    assert tokens.live() == 0
    for store in opened[1:]:
        store.close()
    # The last one closes the pool: no connection of the bot's is left on the server.
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        deadline = time.monotonic() + 30
        while _connections(admin, postgres_url) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _connections(admin, postgres_url) == 0


def _connections(admin: psycopg.Connection[tuple[object, ...]], url: str) -> int:
    row = admin.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
        (url.rsplit("/", 1)[1],),
    ).fetchone()
    return int(str(row[0])) if row else 0


def test_replicas_starting_at_once_apply_each_step_once(databases: Databases) -> None:
    starting = threading.Barrier(4)
    failures: list[BaseException] = []

    def replica() -> None:
        # Each its own opening (its own SQLite connection, its own PostgreSQL pool).
        where = Databases(databases.url, databases.data_dir)
        try:
            starting.wait(timeout=30)
            for store in (TRIAL, *STORES):
                db = where.open(store.database)
                try:
                    migrate(db, store)
                finally:
                    db.close()
        except BaseException as exc:
            failures.append(exc)
        finally:
            where.close()

    threads = [threading.Thread(target=replica) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert failures == []
    db = databases.open("trial")
    try:
        assert rows(db, "SELECT n FROM trial") == [(1,)]
        assert version(db, "trial") == 2
    finally:
        db.close()


REPLICA = """
import sys
from bot.database import Databases, Migrations, open_store
from bot.ops.database_check import STORES
trial = Migrations("trial", "trial", tuple(sys.argv[2:]))
where = Databases(sys.argv[1])
for store in (trial, *STORES):
    open_store(where, store).close()
"""


def test_processes_starting_at_once_wait_for_one_another(postgres_url: str) -> None:
    with psycopg.connect(postgres_url) as holder:
        # Held while the processes start, so that they all arrive at the lock together.
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
        processes = [
            subprocess.Popen(
                [sys.executable, "-c", REPLICA, postgres_url, *TRIAL.steps],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            for _ in range(3)
        ]
        try:
            with psycopg.connect(postgres_url, autocommit=True) as watcher:
                deadline = time.monotonic() + 120
                while _waiting(watcher) < 3 and time.monotonic() < deadline:
                    assert all(p.poll() is None for p in processes), _output(processes)
                    time.sleep(0.05)
                assert _waiting(watcher) == 3
        except BaseException:
            for process in processes:
                process.kill()
                process.wait()
            raise
        holder.commit()  # releases the lock: they go one at a time
    for process in processes:
        assert process.wait(timeout=120) == 0, _output(processes)
        assert process.stdout is not None
        process.stdout.close()
    with psycopg.connect(postgres_url) as db:
        assert db.execute("SELECT n, label FROM trial").fetchall() == [(1, "two")]
        versions = db.execute(
            "SELECT store, count(*) FROM schema_migrations GROUP BY store ORDER BY store"
        ).fetchall()
    assert dict(versions) == {"trial": 2, **{s.store: s.latest for s in STORES}}


def _waiting(watcher: psycopg.Connection[tuple[object, ...]]) -> int:
    row = watcher.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND "
        "database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    ).fetchone()
    return int(str(row[0])) if row else 0


def _output(processes: list[subprocess.Popen[bytes]]) -> str:
    found = []
    for process in processes:
        if process.poll() is not None and process.stdout is not None:
            found.append(process.stdout.read().decode(errors="replace"))
    return "\n".join(found)


def test_missing_server_binaries_name_the_script_that_installs_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(postgres_support.shutil, "which", lambda name: None)
    monkeypatch.setattr(postgres_support, "DEBIAN", tmp_path)
    (tmp_path / "15" / "bin").mkdir(parents=True)  # a version without its server
    with pytest.raises(postgres_support.PostgresMissing, match=r"run scripts/ensure-postgres\.sh"):
        postgres_support.binaries()
