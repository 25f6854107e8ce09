"""`cellmate doctor`'s database checks on both engines: the engine and its round trip, the
migrations still to apply (or applied, or newer than the bot), and a database that does not
answer."""

from __future__ import annotations

import io
import re
import time

from bench.standins.ports import free_port
from bot.conversations.turn_leases import TurnLeases
from bot.database import Databases, open_store
from bot.ops.database_check import STORES, database_check, stores_for
from bot.ops.doctor import report
from bot.settings import Settings


def settings_of(databases: Databases) -> Settings:
    return Settings(data_dir=databases.data_dir, database_url=databases.url)


async def test_doctor_names_the_engine_its_round_trip_and_the_migrations(
    databases: Databases,
) -> None:
    before = await database_check(settings_of(databases))
    assert [(f.name, f.ok) for f in before] == [("database", True), ("migrations", True)]
    if databases.engine == "sqlite":
        assert before[0].detail.startswith("SQLite 3.")
        assert f", files in {databases.data_dir} (embedded: one bot process); " in before[0].detail
    else:
        assert re.match(r"PostgreSQL \d+\.\d+ at cellmate@127\.0\.0\.1:\d+/t_", before[0].detail)
    assert re.search(r"; a statement takes \d+\.\d+ ms$", before[0].detail)
    assert before[1].detail.startswith("applied when the bot starts: history (0 → 1), ")
    assert not before[1].required

    stores = stores_for(settings_of(databases))
    for store in stores:
        open_store(databases, store).close()
    after = await database_check(settings_of(databases))
    assert after[1].detail == f"current: all {len(stores)} stores at their latest"
    # A shared database also keeps the replicas' turn leases, the events they handled and
    # which of them holds each live session.
    assert len(stores) == len(STORES) + 3 * (databases.engine == "postgresql")
    out = io.StringIO()
    assert report(after, out) == 0
    assert "ms" in out.getvalue()
    assert "password" not in out.getvalue()


async def test_doctor_refuses_tables_newer_than_the_bot(databases: Databases) -> None:
    db = open_store(databases, STORES[0])
    try:
        db.execute(
            "INSERT INTO schema_migrations (store, version, applied) VALUES (?, ?, ?)",
            (STORES[0].store, 7, 0.0),
        )
    finally:
        db.close()
    found = await database_check(settings_of(databases))
    assert not found[1].ok
    assert found[1].required
    assert "history (at 7, this bot knows 1)" in found[1].detail


async def test_doctor_says_when_postgresql_does_not_answer() -> None:
    url = f"postgresql://cellmate:hunter2@127.0.0.1:{free_port()}/cellmate"
    found = await database_check(Settings(database_url=url))
    assert [(f.name, f.ok, f.required) for f in found] == [("database", False, True)]
    assert found[0].detail.startswith("PostgreSQL cellmate@127.0.0.1:")
    assert "connection refused" in found[0].detail.lower()
    assert "\n" not in found[0].detail
    assert "hunter2" not in found[0].detail
    assert "CELLMATE_DATABASE_URL" in found[0].fix


async def test_doctor_counts_the_replicas_leases_and_the_lapsed_ones(postgres_url: str) -> None:
    where = Databases(postgres_url)
    clock = [time.time()]
    one = TurnLeases(where, "replica-a", ttl_s=30, clock=lambda: clock[0])
    other = TurnLeases(where, "replica-b", ttl_s=30, clock=lambda: clock[0])
    try:
        settings = Settings(database_url=postgres_url)
        found = {f.name: f for f in await database_check(settings)}
        assert found["leases"].ok
        assert found["leases"].detail == "no turn running on any replica"
        assert one.take("c1", "replica-a/t1")
        assert one.take("c2", "replica-a/t2")
        assert other.take("c3", "replica-b/t1")
        found = {f.name: f for f in await database_check(settings)}
        assert found["leases"].detail == "3 conversation(s) answering now, on 2 replica(s)"
        clock[0] -= 3600  # a lease taken an hour ago and never renewed: its replica died
        assert other.take("c4", "replica-b/t2")
        found = {f.name: f for f in await database_check(settings)}
        assert not found["leases"].ok
        assert not found["leases"].required
        assert found["leases"].detail.endswith("; 1 lapsed (a replica stopped during a turn)")
    finally:
        one.close()
        other.close()
        where.close()
