"""`cellmate doctor`'s database checks: which engine keeps the bot's tables, whether it
answers (and how fast), and whether every store's migrations are applied. Nothing is
migrated here: the bot applies what is missing when it starts."""

from __future__ import annotations

import asyncio
import statistics
import time

from bot.agent.history import MIGRATIONS as HISTORY
from bot.conversations.background_store import MIGRATIONS as BACKGROUND
from bot.conversations.mcp_tokens import MIGRATIONS as TOKENS
from bot.conversations.network import MIGRATIONS as NETWORK
from bot.conversations.policy import MIGRATIONS as POLICIES
from bot.conversations.quotas import MIGRATIONS as QUOTAS
from bot.conversations.schedule_store import MIGRATIONS as SCHEDULES
from bot.conversations.session_owners import MIGRATIONS as OWNERS
from bot.conversations.shared_events import MIGRATIONS as SEEN
from bot.conversations.turn_leases import MIGRATIONS as LEASES
from bot.database import Database, DatabaseError, Databases, Migrations, version
from bot.ops.findings import Finding
from bot.settings import Settings

STORES: tuple[Migrations, ...] = (
    HISTORY,
    QUOTAS,
    POLICIES,
    NETWORK,
    SCHEDULES,
    BACKGROUND,
    TOKENS,
)
SHARED: tuple[Migrations, ...] = (LEASES, SEEN, OWNERS)
"""Stores only a shared database has: what replicas coordinate through."""
CONNECT_S = 5.0
ROUND_TRIPS = 5


async def database_check(settings: Settings) -> list[Finding]:
    return await asyncio.to_thread(check_database, settings)


def stores_for(settings: Settings) -> tuple[Migrations, ...]:
    """The stores the bot opens with these settings."""
    return STORES + SHARED if settings.database_url else STORES


def check_database(settings: Settings) -> list[Finding]:
    where = Databases(settings.database_url, settings.data_dir, timeout_s=CONNECT_S)
    stores = stores_for(settings)
    opened: dict[str, Database] = {}
    leases: Finding | None = None
    try:
        try:
            for store in stores:
                if store.database not in opened:
                    opened[store.database] = where.open(store.database)
            first = opened[stores[0].database]
            latency_ms = _round_trip_ms(first)
            engine = _engine(first, where)
            versions = {
                store.store: version(opened[store.database], store.store) for store in stores
            }
            if settings.database_url and versions[LEASES.store]:
                leases = _leases(opened[LEASES.database])
        except Exception as exc:  # every failure is a finding, whatever its type
            return [_unreachable(where, exc)]
    finally:
        for db in opened.values():
            db.close()
        where.close()
    reached = Finding("database", True, f"{engine}; a statement takes {_ms(latency_ms)}")
    found = [reached, _migrations(versions, stores)]
    return found if leases is None else [*found, leases]


def _leases(db: Database) -> Finding:
    """The replicas' turn leases: how many conversations are being answered, by how many
    replicas, and any a replica left to lapse (it stopped mid-turn)."""
    now = time.time()
    rows = db.execute("SELECT holder, expires FROM turn_leases").rows
    live = [str(holder) for holder, expires in rows if float(expires) >= now]
    lapsed = len(rows) - len(live)
    replicas = {holder.rsplit("/", 1)[0] for holder in live}
    detail = (
        f"{len(live)} conversation(s) answering now, on {len(replicas)} replica(s)"
        if live
        else "no turn running on any replica"
    )
    if not lapsed:
        return Finding("leases", True, detail)
    return Finding(
        "leases",
        False,
        f"{detail}; {lapsed} lapsed (a replica stopped during a turn)",
        "those conversations are free again; the replica's log says why it stopped",
        required=False,
    )


def _round_trip_ms(db: Database) -> float:
    """The median time of a trivial statement: what every store's statement pays at least."""
    times = []
    for _ in range(ROUND_TRIPS):
        started = time.perf_counter()
        db.execute("SELECT 1")
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def _ms(value: float) -> str:
    return f"{value:.3f} ms" if value < 1 else f"{value:.1f} ms"


def _engine(db: Database, where: Databases) -> str:
    if db.engine == "sqlite":
        row = db.execute("SELECT sqlite_version()").one()
        found = row[0] if row else "?"
        return f"SQLite {found}, files in {where.data_dir} (embedded: one bot process)"
    row = db.execute("SHOW server_version").one()
    found = str(row[0]).split()[0] if row else "?"
    return f"PostgreSQL {found} at {where.address}"


def _unreachable(where: Databases, exc: Exception) -> Finding:
    if where.engine == "sqlite":
        fix = "check that CELLMATE_DATA_DIR is writable by the bot"
    else:
        fix = (
            "check CELLMATE_DATABASE_URL (postgresql://user:pass@host:port/db), that the "
            "server answers there and that the database exists"
        )
    said = " ".join(str(exc).split())
    if not isinstance(exc, DatabaseError):  # its message names the database already
        said = f"{where.describe()}: {said}"
    return Finding("database", False, said, fix)


def _migrations(versions: dict[str, int], stores: tuple[Migrations, ...]) -> Finding:
    latest = {store.store: store.latest for store in stores}
    newer = [name for name, found in versions.items() if found > latest[name]]
    if newer:
        named = ", ".join(f"{n} (at {versions[n]}, this bot knows {latest[n]})" for n in newer)
        return Finding(
            "migrations",
            False,
            f"tables newer than this bot: {named}",
            "run the Cellmate version that migrated them (or a newer one)",
        )
    behind = [name for name, found in versions.items() if found < latest[name]]
    if not behind:
        return Finding("migrations", True, f"current: all {len(stores)} stores at their latest")
    named = ", ".join(f"{n} ({versions[n]} → {latest[n]})" for n in behind)
    return Finding("migrations", True, f"applied when the bot starts: {named}", required=False)
