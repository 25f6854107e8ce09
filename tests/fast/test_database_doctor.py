"""`cellmate doctor`'s database checks on both engines: the engine and its round trip, the
migrations still to apply (or applied, or newer than the bot), and a database that does not
answer."""

from __future__ import annotations

import io
import re

from bench.standins.ports import free_port
from bot.database import Databases, open_store
from bot.ops.database_check import STORES, database_check
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

    for store in STORES:
        open_store(databases, store).close()
    after = await database_check(settings_of(databases))
    assert after[1].detail == f"current: all {len(STORES)} stores at their latest"
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
