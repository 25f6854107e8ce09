"""Every running (or queued) turn of the process: for Stop buttons, for draining on shutdown,
and for the Re-run buttons of finished direct runs."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from bot.agent.turn import Turn
from bot.errors import Draining

log = logging.getLogger(__name__)

_ARRIVED_BEFORE_DRAIN: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "arrived_before_drain", default=False
)

SHUTDOWN_NOTICE = "Cellmate is restarting, so this turn was stopped. Please ask again in a minute."


@dataclass(slots=True)
class Running:
    key: str
    turn: Turn
    owner: str
    started: float = field(default_factory=time.monotonic)
    shutdown: bool = False
    """Stopped because the process is shutting down (the reply says so)."""


@dataclass(frozen=True, slots=True)
class RerunSpec:
    code: str
    conversation: str | None
    """The session it ran in; None for a one-off run."""
    server: str = ""
    owner: str = ""
    """Who ran it: a one-off run is theirs (and moderators') to re-run."""


class Turns:
    def __init__(self, remembered_reruns: int = 1000) -> None:
        self.accepting = True
        self._running: dict[str, Running] = {}
        self._arriving = 0
        self._reruns: OrderedDict[str, RerunSpec] = OrderedDict()
        self._remembered = remembered_reruns
        self._idle = asyncio.Event()
        self._idle.set()

    def __len__(self) -> int:
        return len(self._running)

    @contextmanager
    def arriving(self) -> Iterator[None]:
        """A message on its way to a turn (looked up, checked, not registered yet): a drain
        waits for it too, and it may still start its turn (received before the drain began,
        it is answered here; the drain's grace period applies to it as to the others), so an
        event a platform was told was received gets its one answer before the process exits."""
        self._arriving += 1
        self._idle.clear()
        before = _ARRIVED_BEFORE_DRAIN.set(self.accepting)
        try:
            yield
        finally:
            _ARRIVED_BEFORE_DRAIN.reset(before)
            self._arriving -= 1
            if not self._running and not self._arriving:
                self._idle.set()

    @contextmanager
    def running(self, conversation: str, owner: str) -> Iterator[Running]:
        """Register a turn while it runs; raise `Draining` once shutdown began (unless its
        message arrived before)."""
        if not self.admits():
            raise Draining
        key = secrets.token_hex(8)
        entry = Running(key, Turn(conversation), owner)
        self._running[key] = entry
        self._idle.clear()
        try:
            yield entry
        finally:
            del self._running[key]
            if not self._running and not self._arriving:
                self._idle.set()

    def admits(self) -> bool:
        """Whether a turn may start here: not shutting down, or its message arrived before."""
        return self.accepting or _ARRIVED_BEFORE_DRAIN.get()

    def get(self, key: str) -> Running | None:
        return self._running.get(key)

    def keys(self) -> list[str]:
        """The Stop keys of the turns running now."""
        return list(self._running)

    def remember(self, key: str, spec: RerunSpec) -> None:
        self._reruns[key] = spec
        while len(self._reruns) > self._remembered:
            self._reruns.popitem(last=False)

    def rerun(self, key: str) -> RerunSpec | None:
        return self._reruns.get(key)

    async def drain(self, grace_s: float, stop_wait_s: float = 15.0) -> int:
        """Take no new turns; give running ones `grace_s` to finish, then stop them (their
        replies say why) and wait for those replies. Returns how many had to be stopped."""
        self.accepting = False
        try:
            await asyncio.wait_for(self._idle.wait(), grace_s)
            return 0
        except TimeoutError:
            pass
        left = list(self._running.values())
        log.warning("stopping %d turn(s) still running after %g s", len(left), grace_s)
        for entry in left:
            entry.shutdown = True
            entry.turn.stop()
        try:
            await asyncio.wait_for(self._idle.wait(), stop_wait_s)
        except TimeoutError:
            log.error("%d turn(s) did not end after being stopped", len(self._running))
        return len(left)
