"""One turn at a time for each person: a later message waits its turn instead of being refused.

A person's turns start in the order they were sent, each after the one before has finished
and the cooldown has passed. While one waits, its reply shows that it is queued. A bounded
number may wait; past that the message is refused with a reason.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from bot.errors import Busy

Queued = Callable[[str], Awaitable[None]]
MAX_WAITING = 5


class Lines:
    def __init__(self, cooldown_s: float = 0.0, max_waiting: int = MAX_WAITING) -> None:
        self.cooldown_s = cooldown_s
        self.max_waiting = max_waiting
        self._locks: dict[str, asyncio.Lock] = {}
        self._waiting: dict[str, int] = {}
        self._last_start: dict[str, float] = {}

    @property
    def busy(self) -> frozenset[str]:
        """People with a turn running or waiting."""
        return frozenset(user for user, lock in self._locks.items() if lock.locked())

    @asynccontextmanager
    async def turn(self, user: str, queued: Queued) -> AsyncIterator[None]:
        lock = self._locks.setdefault(user, asyncio.Lock())
        wait = self._cooldown_left(user)
        must_wait = lock.locked() or wait > 0
        if must_wait and self._waiting.get(user, 0) >= self.max_waiting:
            raise Busy(
                f"You have {self.max_waiting} requests waiting already; "
                "wait for them, or press Stop on one."
            )
        # Counted before any await, so the lock is never dropped while someone waits for it.
        self._waiting[user] = self._waiting.get(user, 0) + 1
        try:
            if must_wait:
                await queued(
                    "Queued: your previous request is still running."
                    if lock.locked()
                    else f"Queued: starting in {math.ceil(wait)} s."
                )
            await lock.acquire()
        finally:
            self._waiting[user] -= 1
        try:
            wait = self._cooldown_left(user)
            if wait > 0:
                await asyncio.sleep(wait)
            self._last_start[user] = time.monotonic()
            yield
        finally:
            lock.release()
            if not lock.locked() and not self._waiting.get(user):
                self._locks.pop(user, None)
                self._waiting.pop(user, None)

    def _cooldown_left(self, user: str) -> float:
        last = self._last_start.get(user)
        return 0.0 if last is None else last + self.cooldown_s - time.monotonic()
