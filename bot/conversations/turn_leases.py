"""One turn at a time in each conversation across the bot's replicas: a lease in the shared
database. A replica takes a conversation's lease before its turn starts and gives it back at
the end; while another replica holds it, the turn waits, and its reply says so once. A lease
is renewed while its turn runs; a replica that dies stops renewing, and its lease lapses
after `ttl_s`, when another replica may take the conversation over.

In one process the turns of a conversation already wait for each other; the lease only
matters where several processes share a database (CELLMATE_DATABASE_URL)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

from bot.database import Databases, Migrations, open_store

log = logging.getLogger(__name__)

MIGRATIONS = Migrations(
    "turn_leases",
    "leases",
    (
        """
        CREATE TABLE IF NOT EXISTS turn_leases (
            conversation TEXT PRIMARY KEY,
            holder TEXT NOT NULL,
            expires {real} NOT NULL
        );
        """,
    ),
)
TTL_S = 30.0
"""How long a lease outlives its last renewal: a dead replica's conversations wait this long
at most before another replica takes them."""
POLL_S = 0.25
"""How often a waiting turn asks again (the holder may be another process: no event to
wait on)."""
ANOTHER_REPLICA = "Queued: another of the bot's replicas is answering in this conversation."

Queued = Callable[[str], Awaitable[None]]


class LabelTaken(RuntimeError):
    """Another live replica holds this process's sandbox label; the message says what to
    change."""


def replica_name() -> str:
    """This process, as leases name it: the host (a Pod's name) and the process id."""
    return f"{socket.gethostname()}:{os.getpid()}"


class TurnLeases:
    def __init__(
        self,
        where: Databases,
        replica: str | None = None,
        ttl_s: float = TTL_S,
        poll_s: float = POLL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = open_store(where, MIGRATIONS)
        self.replica = replica or replica_name()
        self.ttl_s = ttl_s
        self.poll_s = poll_s
        self.clock = clock
        self._local: dict[str, asyncio.Lock] = {}
        self._waiting: dict[str, int] = {}

    def close(self) -> None:
        self._db.close()

    def ping(self) -> None:
        """One statement to the shared database (raises what it raises): /healthz's check."""
        self._db.execute("SELECT 1")

    # ── the table ────────────────────────────────────────────────────────

    def take(self, conversation: str, holder: str) -> bool:
        """Take the lease for `holder` if nobody holds it, it lapsed, or `holder` has it."""
        now = self.clock()
        row = self._db.execute(
            "INSERT INTO turn_leases (conversation, holder, expires) VALUES (?,?,?) "
            "ON CONFLICT (conversation) DO UPDATE SET holder = excluded.holder, "
            "expires = excluded.expires "
            "WHERE turn_leases.expires < ? OR turn_leases.holder = excluded.holder "
            "RETURNING holder",
            (conversation, holder, now + self.ttl_s, now),
        ).one()
        return row is not None

    def renew(self, conversation: str, holder: str) -> bool:
        """Push the lease's end on; False when `holder` no longer has it."""
        row = self._db.execute(
            "UPDATE turn_leases SET expires = ? WHERE conversation = ? AND holder = ? "
            "RETURNING holder",
            (self.clock() + self.ttl_s, conversation, holder),
        ).one()
        return row is not None

    def give_back(self, conversation: str, holder: str) -> None:
        self._db.execute(
            "DELETE FROM turn_leases WHERE conversation = ? AND holder = ?",
            (conversation, holder),
        )

    def live(self) -> list[str]:
        """The holders of every lease that has not lapsed: the turns running now on all
        the replicas (a holder is `replica/turn`)."""
        rows = self._db.execute(
            "SELECT holder FROM turn_leases WHERE expires >= ?", (self.clock(),)
        ).rows
        return [str(row[0]) for row in rows]

    def holder(self, conversation: str) -> str | None:
        """Who holds the conversation now (a lapsed lease is nobody's)."""
        row = self._db.execute(
            "SELECT holder FROM turn_leases WHERE conversation = ? AND expires >= ?",
            (conversation, self.clock()),
        ).one()
        return None if row is None else str(row[0])

    # ── a turn ───────────────────────────────────────────────────────────

    @contextlib.asynccontextmanager
    async def held(self, conversation: str, queued: Queued) -> AsyncIterator[None]:
        """Hold the conversation's lease for the block: wait for it (told once through
        `queued`), renew it while the block runs, give it back after."""
        # This process's own turns wait for each other here, without asking the database.
        local = self._local.setdefault(conversation, asyncio.Lock())
        self._waiting[conversation] = self._waiting.get(conversation, 0) + 1
        try:
            async with local, self._lease(conversation, queued):
                yield
        finally:
            self._waiting[conversation] -= 1
            if not self._waiting[conversation]:
                del self._waiting[conversation], self._local[conversation]

    @contextlib.asynccontextmanager
    async def _lease(self, conversation: str, queued: Queued) -> AsyncIterator[None]:
        holder = f"{self.replica}/{uuid.uuid4().hex[:12]}"
        told = False
        while not await asyncio.to_thread(self.take, conversation, holder):
            if not told:
                told = True
                await queued(ANOTHER_REPLICA)
            await asyncio.sleep(self.poll_s)
        async with self._kept(conversation, holder):
            yield

    @contextlib.asynccontextmanager
    async def label_held(self, label: str, host: str) -> AsyncIterator[None]:
        """Hold the sandbox label `label` for this process while the block runs. A process
        takes over the sandboxes of its label when it starts (and removes what it cannot
        use), so two live replicas with one label would take each other's: the second is
        refused (LabelTaken). The holder is the host, so a restarted replica (the same Pod
        name) takes its label back at once."""
        key = f"sandboxes:{label}"
        if not await asyncio.to_thread(self.take, key, host):
            other = await asyncio.to_thread(self.holder, key)
            raise LabelTaken(
                f"another replica ({other}) runs with the sandbox label {label!r}: give each "
                "replica its own CELLMATE_INSTANCE (a StatefulSet's Pod name), or shard "
                "Discord (CELLMATE_DISCORD_SHARD_COUNT), which labels each shard's own"
            )
        async with self._kept(key, host):
            yield

    @contextlib.asynccontextmanager
    async def _kept(self, key: str, holder: str) -> AsyncIterator[None]:
        """A lease `holder` has taken: renewed while the block runs, given back after."""
        renewing = asyncio.create_task(self._renew(key, holder))
        try:
            yield
        finally:
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing
            try:
                await asyncio.to_thread(self.give_back, key, holder)
            except Exception:
                # Lapses on its own after ttl_s: what it guards waits that long.
                log.warning("could not give back the lease of %s", key, exc_info=True)

    async def _renew(self, conversation: str, holder: str) -> None:
        while True:
            await asyncio.sleep(self.ttl_s / 3)
            try:
                kept = await asyncio.to_thread(self.renew, conversation, holder)
            except Exception:
                log.warning("could not renew the lease of %s", conversation, exc_info=True)
                continue
            if not kept:
                log.warning(
                    "the lease of %s lapsed while its turn ran: another replica may answer "
                    "there too",
                    conversation,
                )
                return
