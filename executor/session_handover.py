"""Sessions that move between the bot's replicas, through the ledger they share
(executor/ownership.py): what the session manager asks it, and how it adopts another
replica's sandbox.

A run whose key another replica holds takes the record over (compare-and-set) and attaches
to that sandbox by id, as a restarted process does (`SessionKeeper.adopt`); the replica
that lost it lets go when it next asks, or at once when its stream hears the runner answer
the other one (`SandboxTaken`). Before a replica stops, saves or pauses a sandbox it
releases the record (compare-and-set): when the record is not its own any more, it only
lets go. Calls to the ledger run in a thread; when the database cannot answer, nothing is
taken over and nothing another replica may hold is stopped."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from executor.errors import SandboxBusy
from executor.ownership import Owner, SessionOwners
from executor.pool import SandboxPool
from executor.protocol import Recovered, Sandbox, SessionKeeper

log = logging.getLogger(__name__)

T = TypeVar("T")
ADOPT_TRIES = 4
"""How often a sandbox that does not answer is asked before its session counts as gone."""
ADOPT_RETRY_S = 0.5
"""The wait before each further try grows by this much."""
TAKING_OVER = (
    "Another of the bot's replicas is taking this conversation's session over at this "
    "moment; try again in a few seconds."
)
UNKNOWN = Owner("", "")
"""What the ledger said when it could not answer: nothing changes."""


class Handover:
    def __init__(self, pool: SandboxPool) -> None:
        self.pool = pool
        self.owners: SessionOwners | None = None
        """The ledger the bot's replicas share (None: one process, nothing moves)."""

    async def _ask(self, call: Callable[..., T], *args: Any, default: T) -> T:
        """One call to the ledger, in a thread; `default` when the database cannot answer."""
        try:
            return await asyncio.to_thread(call, *args)
        except Exception:
            log.warning("the session ledger did not answer", exc_info=True)
            return default

    async def record(self, key: str, sandbox: Sandbox) -> None:
        """This replica holds the key's new session in `sandbox`."""
        if self.owners is not None:
            await self._ask(self.owners.record, key, sandbox.id, default=None)

    async def taken(self, key: str, sandbox: Sandbox) -> bool:
        """Whether another replica took over the key's session that this one holds in
        `sandbox` (a record lost while the database was away is made again)."""
        if self.owners is None:
            return False
        owner: Owner | None = await self._ask(self.owners.owner, key, default=UNKNOWN)
        if owner is None:
            await self.record(key, sandbox)
            return False
        return owner != UNKNOWN and owner.replica != self.owners.replica

    async def adopt(self, key: str) -> Recovered | None:
        """The key's session from the replica the ledger says holds it: its record taken
        over and its sandbox attached to here, variables and all (that replica lets go of
        it). None when no other replica holds it, or its sandbox is gone (its record is
        dropped). SandboxBusy when another replica takes it at the same moment.

        A sandbox that does not answer may only be busy with another host (the replica that
        held it restarting and attaching to it again, or letting go of it as it shuts
        down), so it is asked again, the record kept, before it counts as gone: a new
        session in its place would lose the conversation's variables."""
        owners, backend = self.owners, self.pool.backend
        if owners is None or not isinstance(backend, SessionKeeper) or not backend.keeps_sessions:
            return None
        owner = await self._ask(owners.owner, key, default=None)
        if owner is None:
            return None
        # A record naming this replica for a session not live here is an earlier process's
        # of the same name (a restarted Pod), or one handed back to it: attach to it as well.
        ours = owner.replica == owners.replica
        if not ours and not await self._ask(
            owners.take, key, owner.sandbox, owner.replica, default=False
        ):
            raise SandboxBusy(TAKING_OVER)
        for attempt in range(ADOPT_TRIES):
            if attempt:
                await asyncio.sleep(ADOPT_RETRY_S * attempt)
            try:
                found = await backend.adopt(owner.sandbox)
            except (Exception, asyncio.CancelledError):
                # Stopped (or failed) before the sandbox answered: it may hold the session
                # yet, so the record goes back to the replica that had it.
                if not ours:
                    back = (key, owner.sandbox, owner.replica)
                    await asyncio.shield(self._ask(owners.give_back, *back, default=False))
                raise
            if found is not None and found.session == key:
                if ours:
                    log.info("session %s: attached again to its sandbox", key)
                else:
                    log.info("session %s: taken over from replica %s", key, owner.replica)
                return found
            if found is not None:
                await backend.detach(found.sandbox)
                break  # it answers, for another session: not this one's sandbox any more
        await self._ask(owners.release, key, owner.sandbox, default=False)
        log.info("session %s: replica %s's sandbox is gone", key, owner.replica)
        return None

    async def release(self, key: str, sandbox: Sandbox) -> bool:
        """Before this replica stops, saves or pauses the key's sandbox: whether it still may
        (True without a ledger). With one, its record is released by compare-and-set; False
        when another replica took it over (or the ledger cannot say): it must go on."""
        if self.owners is None:
            return True
        return await self._ask(self.owners.release, key, sandbox.id, default=False)

    async def keeps(self, key: str) -> bool:
        """On a shutdown that keeps sessions: whether the key's session is still this
        replica's (its record stays, for this replica's next start)."""
        if self.owners is None:
            return True
        owner = await self._ask(self.owners.owner, key, default=None)
        return owner is None or owner.replica == self.owners.replica

    async def lost(self, held: Mapping[str, Sandbox]) -> list[str]:
        """Which of the sessions held here (key -> sandbox) other replicas took over."""
        owners = self.owners
        if owners is None or not held:
            return []
        mine = await self._ask(owners.mine, default=None)
        if mine is None:
            return []
        lost = []
        for key, sandbox in held.items():
            if mine.get(key) == sandbox.id:
                continue
            owner = await self._ask(owners.owner, key, default=None)
            if owner is not None and owner.replica != owners.replica:
                lost.append(key)
        return lost
