"""A pool of fresh sandboxes, started ahead of demand, each handed out once.

The pool keeps `size` sandboxes with a ready kernel waiting, and never lets more than
`max_live` sandboxes exist at once (waiting, starting or in use). When every slot is in use,
callers queue in order, up to `queue_limit`; past that they get `SandboxBusy` at once.
A sandbox that comes back is destroyed, never handed out again.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from executor.errors import ExecutorError, SandboxBusy
from executor.limits import SandboxLimits
from executor.protocol import Sandbox, SandboxBackend, SessionKeeper
from executor.run import wait_ready, wait_warm

log = logging.getLogger(__name__)

QueueCallback = Callable[[int], Awaitable[None] | None]
MAX_PARALLEL_STARTS = 2
WANTED_POLL_S = 0.05
"""How soon a sandbox still warming up goes to a caller that waits for one."""


@dataclass(frozen=True, slots=True)
class Lease:
    sandbox: Sandbox
    startup_ms: int
    """How long its kernel took to become ready (paid before the caller asked, if pooled)."""


class SandboxPool:
    def __init__(
        self,
        backend: SandboxBackend,
        limits: SandboxLimits,
        size: int = 2,
        max_live: int = 20,
        queue_limit: int = 50,
    ) -> None:
        if size < 0 or max_live < 1 or queue_limit < 0:
            raise ValueError("pool size must be >= 0, max_live >= 1, queue_limit >= 0")
        self.backend = backend
        self.limits = limits
        self.size = min(size, max_live)
        self.max_live = max_live
        self.queue_limit = queue_limit
        self._ready: asyncio.Queue[Lease | ExecutorError] = asyncio.Queue()
        self._starting = 0
        self._idle = 0
        self._leased = 0
        self._waiting = 0
        self._wake = asyncio.Event()
        self._refill: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self._orphans: list[Sandbox] = []
        self.last_error: ExecutorError | None = None

    @property
    def live(self) -> int:
        return self.ready + self._starting + self._leased

    @property
    def ready(self) -> int:
        return self._idle

    @property
    def waiting(self) -> int:
        return self._waiting

    @property
    def full(self) -> bool:
        """Whether a new caller would have to wait: no ready sandbox and no free slot."""
        return not self._idle and self._leased + self._waiting >= self.max_live

    def start(self) -> None:
        if self._refill is None:
            self._refill = asyncio.create_task(self._refill_loop(), name="cellmate-pool-refill")

    async def acquire(self, on_queued: QueueCallback | None = None) -> Lease:
        """A fresh sandbox with a ready kernel; waits in line when every slot is taken."""
        if self._closed:
            raise ExecutorError("the executor is shutting down")
        self.start()
        if self.full:
            position = self._leased + self._waiting - self.max_live + 1
            if position > self.queue_limit:
                raise SandboxBusy(
                    f"All {self.max_live} sandboxes are busy and {position - 1} requests are "
                    "already waiting; try again in a minute."
                )
            if on_queued is not None:
                returned = on_queued(position)
                if inspect.isawaitable(returned):
                    await returned
        self._waiting += 1
        self._wake.set()
        try:
            while True:
                item = await self._ready.get()
                if isinstance(item, ExecutorError):
                    raise item
                self._idle -= 1
                if item.sandbox.alive:
                    break
                self._discard(item.sandbox)  # it died while waiting (an engine restart)
        finally:
            self._waiting -= 1
        self._leased += 1
        self._wake.set()
        return Lease(item.sandbox, item.startup_ms)

    async def acquire_custom(self, limits: SandboxLimits) -> Lease:
        """A sandbox with other container limits than the pool's: started now, counted too."""
        if self._closed:
            raise ExecutorError("the executor is shutting down")
        if self.live >= self.max_live and self._idle:
            item = self._ready.get_nowait()
            if not isinstance(item, ExecutorError):
                self._idle -= 1
                self._discard(item.sandbox)
        if self.live >= self.max_live:
            raise SandboxBusy(f"All {self.max_live} sandboxes are busy; try again in a minute.")
        self._leased += 1
        sandbox: Sandbox | None = None
        try:
            sandbox = await self.backend.start(limits, None)
            startup_ms = await wait_ready(sandbox, limits.startup_timeout_s)
        except BaseException:
            self._leased -= 1
            if sandbox is not None:
                await self._destroy(sandbox)
            raise
        return Lease(sandbox, startup_ms)

    def adopt(self, sandbox: Sandbox) -> Lease:
        """Count a sandbox an earlier process started (a session found again) as leased."""
        self._leased += 1
        return Lease(sandbox, 0)

    def discard(self, sandbox: Sandbox) -> None:
        """Destroy a sandbox this pool never counted, in the background."""
        self._discard(sandbox)

    def release(self, sandbox: Sandbox) -> None:
        """Give a leased sandbox back: it is destroyed in the background."""
        self._leased -= 1
        self._discard(sandbox)
        self._wake.set()

    def let_go(self, sandbox: Sandbox) -> None:
        """A leased sandbox that was paused to a snapshot: no longer counted, not removed
        (its snapshot holds no memory; the session's next run resumes and adopts it)."""
        self._leased -= 1
        self._wake.set()

    def hand_over(self, sandbox: Sandbox) -> None:
        """A leased sandbox another replica took over: no longer counted, and let go of
        (its stream closed) in the background, never stopped."""
        self._leased -= 1
        self._wake.set()
        if isinstance(self.backend, SessionKeeper):
            task = asyncio.create_task(self._detach(self.backend, sandbox))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _detach(backend: SessionKeeper, sandbox: Sandbox) -> None:
        try:
            await backend.detach(sandbox)
        except Exception as exc:  # a stream that will not close: it ends with the process
            log.warning("could not let go of sandbox %s: %s", sandbox.id[:12], exc)

    def _discard(self, sandbox: Sandbox) -> None:
        task = asyncio.create_task(self._destroy(sandbox))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _destroy(self, sandbox: Sandbox) -> None:
        try:
            await sandbox.destroy()
        except ExecutorError as exc:
            # The engine may be restarting: try again later, and on close.
            log.warning("could not remove sandbox %s yet: %s", sandbox.id[:12], exc)
            self._orphans.append(sandbox)

    async def _retry_orphans(self) -> None:
        orphans, self._orphans = self._orphans, []
        for sandbox in orphans:
            await self._destroy(sandbox)

    def _wanted(self) -> int:
        return min(self.max_live, self._leased + self.size + self._waiting)

    async def _refill_loop(self) -> None:
        backoff = 0.5
        while not self._closed:
            self._wake.clear()
            while (
                not self._closed
                and self.live < self._wanted()
                and self._starting < MAX_PARALLEL_STARTS
            ):
                self._starting += 1
                task = asyncio.create_task(self._start_one())
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(None if not self._orphans else backoff):
                    await self._wake.wait()
            if self._orphans:
                await self._retry_orphans()
            if self.last_error is not None:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30.0)
            else:
                backoff = 0.5

    async def _start_one(self) -> None:
        sandbox: Sandbox | None = None
        try:
            sandbox = await self.backend.start(self.limits, None)
            startup_ms = await wait_ready(sandbox, self.limits.startup_timeout_s)
            await self._warm_unless_wanted(sandbox)
        except ExecutorError as exc:
            self.last_error = exc
            log.warning("could not start a sandbox: %s", exc)
            if sandbox is not None:
                await self._destroy(sandbox)
            if self._waiting > self._ready.qsize():
                self._ready.put_nowait(exc)  # the first caller in line learns why
        else:
            self.last_error = None
            if self._closed:
                await self._destroy(sandbox)
            else:
                self._idle += 1
                self._ready.put_nowait(Lease(sandbox, startup_ms))
        finally:
            self._starting -= 1
            self._wake.set()

    async def _warm_unless_wanted(self, sandbox: Sandbox) -> None:
        """Keep a new sandbox until its data stack is loaded, so that the first chart from the
        pool finds it warm; but hand it out at once to a caller that waits for one."""
        warming = asyncio.create_task(wait_warm(sandbox))
        try:
            async with asyncio.timeout(self.limits.startup_timeout_s):
                while not (warming.done() or self._closed or self._waiting > self._ready.qsize()):
                    await asyncio.wait({warming}, timeout=WANTED_POLL_S)
        except TimeoutError:
            pass  # warming up for that long: it is usable all the same
        finally:
            warming.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await warming

    async def close(self) -> None:
        """Stop refilling and destroy every sandbox the pool still holds or is starting."""
        self._closed = True
        self._wake.set()
        if self._refill is not None:
            self._refill.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refill
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        while not self._ready.empty():
            item = self._ready.get_nowait()
            if not isinstance(item, ExecutorError):
                self._idle -= 1
                await self._destroy(item.sandbox)
        for _ in range(self._waiting):
            self._ready.put_nowait(ExecutorError("the executor is shutting down"))
        await self._retry_orphans()
        if self._orphans:
            log.warning(
                "%d sandbox(es) could not be removed; the next start-up removes them",
                len(self._orphans),
            )
