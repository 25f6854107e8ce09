"""Session mode: one live kernel per conversation key, so follow-ups reuse its state.

A session takes a fresh sandbox from the pool on its first run and keeps it until it is idle
too long, reaches its maximum lifetime, is closed, or its kernel or sandbox dies; the next
run starts a new session and says why (`ended`). Runs on one key queue in order; different
keys run in parallel. `session_workspace` keeps workspaces; `session_handover` moves sessions
between the bot's replicas; `session_files` the rest."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from typing import Any

from executor.errors import SandboxBusy, SandboxError, SandboxTaken
from executor.limits import SandboxLimits
from executor.models import ExecutionResult, OutputCollector, Status
from executor.ownership import SessionOwners
from executor.pool import Lease, QueueCallback, SandboxPool
from executor.protocol import Recovered, Sandbox, SnapshotKeeper
from executor.run import (
    OutputCallback,
    RunOutcome,
    describe_exit,
    execute,
    judge,
    new_collector,
    truncation_note,
    unanswered_note,
)
from executor.run_input import InputCallback, RunClock
from executor.run_scope import PYTHON, RunScope
from executor.runner_client import RunnerClient
from executor.session_files import SessionFiles, changed_files
from executor.session_handover import Handover
from executor.session_live import Found, Live, Restore, RunHooks, run_limits, unless_stopped
from executor.session_news import (
    Ended,
    Ending,
    WorkspaceEvent,
    WorkspaceNews,
    ending_of_run,
    ending_of_sandbox,
)
from executor.session_workspace import Restored, WorkspaceKeeper
from executor.workspace import WorkspaceSettings, WorkspaceStore

__all__ = ["SHUTDOWN_SAVE_S", "Restore", "Restored", "SessionManager"]

log = logging.getLogger(__name__)

REMEMBERED_ENDINGS = 10_000
STOPPED_BEFORE_START = "The run was stopped before it started; nothing ran."
NOT_FOLLOWED = (
    "The run could not be followed after the restart: its session was not found again "
    "(the sandbox was gone, or another secret was set)."
)
BESIDE = "\x00beside"
"""Appended to a key: the lock and stop of runs in the session's second kernel."""
BESIDE_DIED = (
    "The second kernel (beside the run that goes on) stopped {how} while running the code; "
    "the session and its run go on."
)
SHUTDOWN_SAVE_S = 20.0
"""On shutdown, how long every session's save may take, all of them at once."""
TAKEOVER_CHECK_S = 2.0
"""With a ledger, how often this replica asks which of its idle sessions other replicas took
over: until it lets go, its attach stream also receives what their runs print, unread."""
CLAIM_TRIES = 3
"""Pooled sandboxes tried for a new session before its start fails (an engine restart can
end every one that waits)."""


class SessionManager:
    def __init__(
        self,
        pool: SandboxPool,
        limits: SandboxLimits,
        idle_timeout_s: float = 900.0,
        max_lifetime_s: float = 4 * 3600.0,
        reap_interval_s: float = 15.0,
        workspaces: WorkspaceStore | None = None,
        workspace_settings: WorkspaceSettings | None = None,
        shutdown_save_s: float = SHUTDOWN_SAVE_S,
        pause_after_s: float = 0.0,
        pause_max_mb: int = 4096,
    ) -> None:
        self.shutdown_save_s = shutdown_save_s
        """On shutdown, sessions' workspaces are saved at once, each within this long."""
        self.pause_after_s = pause_after_s
        """A session idle this long is paused to a memory snapshot (where the backend can
        take one, and workspaces are kept) instead of waiting for its idle timeout: it
        holds no memory, and its next run resumes it with everything it had. 0: never."""
        self.pause_max_mb = pause_max_mb
        """A sandbox using more memory than this is not paused (its workspace is saved)."""
        self._pause_refusal: str | None = None
        self._pause_checked = False
        self.workspaces = workspaces
        """Where a session's workspace goes when it ends for any reason but a reset, to be
        restored into the next session of the same key; None: sessions end with nothing kept."""
        self.workspace_settings = workspace_settings or WorkspaceSettings()
        self.keeper = WorkspaceKeeper(self, pool, limits, workspaces, self.workspace_settings)
        self.files = SessionFiles(self, limits)
        self.pool = pool
        self.limits = limits
        self.idle_timeout_s = idle_timeout_s
        self.max_lifetime_s = max_lifetime_s
        self.reap_interval_s = reap_interval_s
        self._live: dict[str, Live] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._stops: dict[str, asyncio.Event] = {}
        self._waiting_stops: dict[str, set[asyncio.Event]] = {}
        """Stop events of runs that wait for the key's lock or a sandbox."""
        self._endings: OrderedDict[str, Ended] = OrderedDict()
        self._resumed: set[str] = set()
        """Sessions found again after a restart whose next run has not said so yet."""
        self._running: dict[str, str] = {}
        """The id of the run going on in each key's session."""
        self._run_started: dict[str, asyncio.Event] = {}
        """Set when a run starts in the key's session (for code waiting to go beside it)."""
        self._to_keep: dict[str, str] = {}
        """Runs to keep from their start, which wait for the key's session, by key."""
        self._kept: dict[str, str] = {}
        """Runs kept for a later process to follow (they went on in the background), by key:
        a shutdown that keeps sessions leaves them going."""
        self._saving = self.keeper.saving
        self._reaper: asyncio.Task[None] | None = None
        self.handover = Handover(pool)
        self._ending: dict[str, asyncio.Task[None]] = {}
        """Sessions being ended in the background (with a ledger), by key."""

    @property
    def owners(self) -> SessionOwners | None:
        """The ledger the bot's replicas share (None: one process). A run whose key another
        replica holds adopts that replica's sandbox; a sandbox another replica took over is
        let go, never stopped, saved or paused here."""
        return self.handover.owners

    @owners.setter
    def owners(self, owners: SessionOwners | None) -> None:
        self.handover.owners = owners

    @property
    def active(self) -> list[str]:
        return list(self._live)

    def start(self) -> None:
        if self._reaper is None:
            self._reaper = asyncio.create_task(self._reap_loop(), name="cellmate-session-reaper")

    def lock(self, key: str) -> asyncio.Lock:
        return self._locks.setdefault(key, asyncio.Lock())

    def live(self, key: str) -> Live | None:
        return self._live.get(key)

    def owner_of(self, address: str) -> str | None:
        """The key of the session whose sandbox has `address` on the sandbox network (None:
        no session's, such as a sandbox still waiting in the pool)."""
        for key, live in self._live.items():
            if live.lease.sandbox.address == address:
                return key
        return None

    async def open(self, key: str) -> Live:
        return (await self._session(key, None))[0]

    async def run(
        self,
        key: str,
        cells: Sequence[str],
        *,
        on_output: OutputCallback | None = None,
        on_queued: QueueCallback | None = None,
        stop: asyncio.Event | None = None,
        restore: Restore = Restore.VARIABLES,
        on_input: InputCallback | None = None,
        clock: RunClock | None = None,
        run_id: str = "",
        beside: asyncio.Event | None = None,
        scope: RunScope = PYTHON,
        **overrides: Any,
    ) -> ExecutionResult:
        """Run cells in the key's session. `restore`: whether a saved workspace's variables
        may be loaded first (a new session's, with automatic restore on). `clock`: the
        run's time limit, which the caller may raise while it runs. `run_id`: the caller's
        name for the run (for `keep`). `beside`: once set while another run holds the
        session, the cells stop waiting for it and run in a second kernel beside it (Python
        only). `scope`: the run's language, and its own env and working folder."""
        limits = run_limits(self.limits, overrides)
        stop = stop or asyncio.Event()
        run_id = run_id or uuid.uuid4().hex
        # Until the run starts, a stop for the key ends its wait (behind another run, or for
        # a sandbox) and nothing runs.
        waiting = self._waiting_stops.setdefault(key, set())
        waiting.add(stop)
        try:
            if scope.language != "python":
                beside = None
            if not await self._turn_or_beside(key, beside):
                waiting.discard(stop)
                hooks = RunHooks(on_output, on_queued, on_input, clock)
                return await self._run_beside(key, cells, limits, hooks, stop, run_id, scope)
            async with _held(self.lock(key)):
                found = await unless_stopped(self._session(key, on_queued), stop)
                if found is None:
                    return new_collector(limits).result(
                        Status.KILLED, STOPPED_BEFORE_START, runtime=limits.runtime
                    )
                waiting.discard(stop)
                hooks = RunHooks(on_output, on_queued, on_input, clock)
                result = await self._run_on(
                    key, found, cells, limits, hooks, stop, restore, run_id, scope
                )
        finally:
            if self._to_keep.get(key) == run_id:  # it never started
                self._to_keep.pop(key, None)
            waiting.discard(stop)
            if not waiting:
                self._waiting_stops.pop(key, None)
        self._relieve()
        return result

    async def _run_on(
        self,
        key: str,
        found: Found,
        cells: Sequence[str],
        limits: SandboxLimits,
        hooks: RunHooks,
        stop: asyncio.Event,
        restore: Restore,
        run_id: str,
        scope: RunScope = PYTHON,
    ) -> ExecutionResult:
        """Run cells in the key's live session (its lock held)."""
        live, ending = found
        self._stops[key] = stop
        collector = new_collector(limits)
        self._kept.pop(key, None)  # the runner keeps one run: this one, from now on

        async def run_in(sandbox: Sandbox) -> RunOutcome:
            self._running[key] = run_id
            if (started := self._run_started.pop(key, None)) is not None:
                started.set()
            keep = self._to_keep.get(key) == run_id
            if keep:
                self._to_keep.pop(key, None)
                self._kept[key] = run_id
            outcome = await execute(
                sandbox,
                cells,
                limits,
                collector,
                on_output=hooks.on_output,
                stop=stop,
                on_input=hooks.on_input,
                clock=hooks.clock,
                run_id=run_id,
                keep=keep,
                scope=scope,
            )
            if outcome.started:
                live.acks = True
            elif outcome.nothing_ran and live.acks:  # ended (removed, say), the request unread
                raise SandboxError("the sandbox's output ended before its runner took the run")
            return outcome

        try:
            await self.keeper.before_run(key, live, restore)
            try:
                outcome = await run_in(live.lease.sandbox)
            except SandboxTaken:
                self._forget(key)
                if collector.stdout or collector.results:
                    raise
                # Another replica took the session over (its answer was waiting in this
                # side's stream) before the code started: take it back, and run there.
                live, ending = await self._session(key, hooks.on_queued)
                await self.keeper.before_run(key, live, restore)
                outcome = await run_in(live.lease.sandbox)
            except SandboxError:
                if collector.stdout or collector.results:
                    raise
                # The sandbox vanished before the code started: nothing ran, so run it in
                # a new session instead of failing.
                self._drop(key, Ended(Ending.SANDBOX_STOPPED))
                live, ending = await self._session(key, hooks.on_queued)
                await self.keeper.before_run(key, live, restore)
                outcome = await run_in(live.lease.sandbox)
        finally:
            self._stops.pop(key, None)
            self._running.pop(key, None)
        live.last_used = time.monotonic()
        if scope.language != "python":
            live.languages.add(scope.language)
        return await self._result(key, live, outcome, collector, limits, ending)

    async def _turn_or_beside(self, key: str, beside: asyncio.Event | None) -> bool:
        """Wait for the key's lock (True: acquired), or until `beside` is set while a run
        goes on in the key's session (False: the code runs beside it)."""
        lock = self.lock(key)
        if beside is None or not lock.locked():
            await lock.acquire()
            return True
        acquiring = asyncio.ensure_future(lock.acquire())
        asked = asyncio.ensure_future(self._beside_possible(key, beside))
        try:
            await asyncio.wait({acquiring, asked}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            if acquiring.done() and not acquiring.cancelled():
                lock.release()
            raise
        finally:
            asked.cancel()
            if not acquiring.done():
                acquiring.cancel()
        return acquiring.done() and not acquiring.cancelled()

    async def _beside_possible(self, key: str, beside: asyncio.Event) -> None:
        """Returns once `beside` is set and a run goes on in the key's session."""
        await beside.wait()
        while key not in self._running or key not in self._live:
            # The lock is held for something else (a start, a restore): the wait goes on
            # for the lock, unless a run starts meanwhile.
            await self._run_started.setdefault(key, asyncio.Event()).wait()

    async def _run_beside(
        self,
        key: str,
        cells: Sequence[str],
        limits: SandboxLimits,
        hooks: RunHooks,
        stop: asyncio.Event,
        run_id: str,
        scope: RunScope = PYTHON,
    ) -> ExecutionResult:
        """Run cells in the session's second kernel, beside the run that holds the key. It
        ends at its time limit: it does not go on in the background as the run beside it may."""
        live = self._live[key]
        if hooks.clock is not None:
            hooks.clock.on_limit = None
        async with self.lock(key + BESIDE):
            self._stops[key + BESIDE] = stop
            collector = new_collector(limits)
            try:
                outcome = await execute(
                    live.lease.sandbox,
                    cells,
                    limits,
                    collector,
                    on_output=hooks.on_output,
                    stop=stop,
                    clock=hooks.clock,
                    run_id=run_id,
                    kernel="beside",
                    scope=scope,
                )
            finally:
                self._stops.pop(key + BESIDE, None)
        sandbox = live.lease.sandbox
        if outcome.sandbox_usable or not sandbox.alive or outcome.killed_by_host:
            result = await self._result(key, live, outcome, collector, limits, None)
        else:  # the second kernel died: the session's own goes on
            how = describe_exit(outcome.kernel_exit_code)
            result = collector.result(
                Status.KILLED,
                BESIDE_DIED.format(how=how),
                duration_ms=outcome.duration_ms,
                runtime=limits.runtime,
            )
        return dataclasses.replace(result, beside=True)

    async def keep(self, key: str, run_id: str) -> None:
        """Keep the key's run `run_id` going past this process (it went on in the
        background): a shutdown that keeps sessions leaves it running, and a later process
        can `follow` it. A run still waiting for its session is kept from its start."""
        live = self._live.get(key)
        if live is not None and self._running.get(key) == run_id:
            await RunnerClient(live.lease.sandbox).keep(run_id)
            self._kept[key] = run_id
        elif self._kept.get(key) != run_id:
            self._to_keep[key] = run_id

    def kept(self, key: str) -> str | None:
        """The id of the kept run in the key's session, if any."""
        return self._kept.get(key)

    async def follow(
        self,
        key: str,
        run_id: str,
        *,
        on_output: OutputCallback | None = None,
        stop: asyncio.Event | None = None,
        clock: RunClock | None = None,
    ) -> ExecutionResult:
        """Take over a kept run that an earlier process left going (its session found again):
        its result, as the run's own would have been, its outputs from the start."""
        limits = self.limits
        stop = stop or asyncio.Event()
        async with self.lock(key):
            live = self._live.get(key)
            if live is None or self._kept.get(key) != run_id:
                return new_collector(limits).result(
                    Status.KILLED, NOT_FOLLOWED, runtime=limits.runtime
                )
            self._stops[key] = stop
            self._running[key] = run_id
            collector = new_collector(limits)
            try:
                outcome = await execute(
                    live.lease.sandbox,
                    (),
                    limits,
                    collector,
                    on_output=on_output,
                    stop=stop,
                    clock=clock,
                    run_id=run_id,
                    follow=True,
                )
            finally:
                self._stops.pop(key, None)
                self._running.pop(key, None)
            # Followed to its end (a follow cancelled by a shutdown leaves it kept, for the
            # process after this one).
            self._kept.pop(key, None)
            live.last_used = time.monotonic()
            self._resumed.discard(key)  # the followed run's report says it went on
            return await self._result(key, live, outcome, collector, limits, None)

    async def _result(
        self,
        key: str,
        live: Live,
        outcome: RunOutcome,
        collector: OutputCollector,
        limits: SandboxLimits,
        ending: Ended | None,
    ) -> ExecutionResult:
        sandbox = live.lease.sandbox
        if outcome.sandbox_usable:
            status, message = judge(outcome, False, None, limits)
            files, skipped = await changed_files(live, outcome.changed, limits)
        else:
            state = await sandbox.exit_state()
            status, message = judge(outcome, state.oom_killed, state.exit_code, limits)
            damaged = bool(outcome.damaged)
            self._drop(key, ending_of_run(status.value, message, sandbox.alive, damaged))
            files, skipped = [], []
        live.secret_given |= outcome.secret_given
        truncated = outcome.truncated or collector.truncated
        dropped = outcome.dropped_results + collector.dropped
        message = truncation_note(message, truncated, limits, dropped)
        message = unanswered_note(message, outcome.inputs)
        news = self.news(key)
        resumed = ending is None and news is None and key in self._resumed
        if resumed:
            self._resumed.discard(key)
        return collector.result(
            status,
            message,
            files=tuple(files),
            skipped_files=tuple(skipped),
            output_truncated=truncated,
            dropped_results=dropped,
            execution_count=outcome.execution_count,
            duration_ms=outcome.duration_ms,
            startup_ms=live.lease.startup_ms,
            runtime=limits.runtime,
            session_restarted=ending is not None,
            ended=ending,
            workspace_news=news,
            resumed=resumed,
            inputs=tuple(outcome.inputs),
        )

    async def _session(self, key: str, on_queued: QueueCallback | None) -> Found:
        """The key's live session, or a new one with the reason the previous one ended."""
        live = self._live.get(key)
        if live is not None and not live.lease.sandbox.alive:
            self._drop(key, ending_of_sandbox(live.lease.sandbox))
            live = None
        if live is not None and await self.handover.taken(key, live.lease.sandbox):
            self._forget(key)
            live = None
        if live is not None:
            return live, None
        if (ending := self._ending.get(key)) is not None:
            await asyncio.wait([ending])  # its record released (or found taken over) first
        if self.pool.full:
            await self.pause_refusal()  # known before the room is made, with no await there
            self._make_room(key)
        adopted = await self._adopted(key)
        if adopted is not None:
            return adopted, None
        if self.workspaces is not None:
            resumed = await self.keeper.resume(key)
            if resumed is not None:
                self._live[key] = resumed
                self._endings.pop(key, None)
                await self.handover.record(key, resumed.lease.sandbox)
                return resumed, None
        lease = await self._claimed(key, on_queued)
        now = time.monotonic()
        live = self._live[key] = Live(lease=lease, created=now, last_used=now, acks=True)
        await self.handover.record(key, lease.sandbox)
        if self.workspaces is not None:
            await self.keeper.started(key, live)
        return live, self._endings.pop(key, None)

    async def _claimed(self, key: str, on_queued: QueueCallback | None) -> Lease:
        """A sandbox from the pool, told whose session it holds (for a later process to find
        it again). One that ended while it waited in the pool (an engine restart, its
        stream's end not read yet) fails that first request: nothing ran in it, so it is
        given back and another taken."""
        tries = 1
        while True:
            lease = await self.pool.acquire(on_queued)
            try:
                await RunnerClient(lease.sandbox).claim(key)
            except SandboxError:
                self.pool.release(lease.sandbox)
                if tries >= CLAIM_TRIES:
                    raise
                tries += 1
                log.info("a pooled sandbox had ended while it waited; taking another")
            else:
                return lease

    async def _adopted(self, key: str) -> Live | None:
        """The key's session as another replica left it (see Handover.adopt), now live
        here; its next run says nothing: the session simply carries on."""
        found = await self.handover.adopt(key)
        if found is None:
            return None
        now = time.monotonic()
        live = self._live[key] = Live(
            lease=self.pool.adopt(found.sandbox), created=now, last_used=now
        )
        if found.kept:
            self._kept[key] = found.kept
        self._endings.pop(key, None)
        return live

    def _forget(self, key: str) -> None:
        """Another replica took the key's session over: let go of its sandbox, which goes on
        there (nothing is stopped or saved, and no ending is noted)."""
        live = self._take(key)
        self._kept.pop(key, None)
        if live is not None:
            log.info("session %s: another replica took it over", key)
            self.pool.hand_over(live.lease.sandbox)

    async def _notice_takeovers(self) -> None:
        """Let go of the idle sessions that other replicas took over (their runners answer
        those now; this side's stream would only fill up)."""
        held = {key: live.lease.sandbox for key, live in self._live.items()}
        for key in await self.handover.lost(held):
            live = self._live.get(key)
            if live is not None and live.lease.sandbox is held[key] and not self.lock(key).locked():
                self._forget(key)

    def news(self, key: str) -> WorkspaceNews | None:
        """What the key's next result tells about its workspace or snapshot (once)."""
        news = self.keeper.notes.pop(key, None)
        why = self.keeper.snapshot_why.pop(key, "")
        if why:
            news = dataclasses.replace(
                news or WorkspaceNews(WorkspaceEvent.NONE_SAVED), snapshot_why=why
            )
        return news

    async def pause_refusal(self) -> str | None:
        """Why this manager's sessions are not paused to memory snapshots (None: they are)."""
        if not self._pause_checked:
            backend = self.pool.backend
            if self.workspaces is None:
                self._pause_refusal = "workspaces are not kept, and a paused session is one"
            elif not isinstance(backend, SnapshotKeeper):
                self._pause_refusal = "this backend cannot take memory snapshots"
            else:
                self._pause_refusal = await backend.pause_refusal(self.limits)
            self._pause_checked = True
        return self._pause_refusal

    async def pause(self, key: str) -> str | None:
        """Pause the key's session now: to a memory snapshot where one can be taken (None),
        else its workspace is saved and it ends as at its idle timeout (why not, returned).
        Nothing happens to a key without a live session (None)."""
        async with self.lock(key):
            live = self._live.get(key)
            if live is None or not live.lease.sandbox.alive:
                return None
            refusal = await self.pause_refusal()
            if self.workspaces is None:
                self._drop(key, Ended(Ending.IDLE, 0))
                return refusal
            self._take(key)
            if not await self.handover.release(key, live.lease.sandbox):
                self.pool.hand_over(live.lease.sandbox)  # another replica's now
                return None
            pause_mb = self.pause_max_mb if refusal is None else None
            await self.keeper.save_and_release(key, live, pause_mb=pause_mb)
            return refusal if refusal is not None else self.keeper.snapshot_why.get(key)

    def adopt(self, found: Sequence[Recovered]) -> None:
        """Take on sessions an earlier process left running: their next run says so."""
        now = time.monotonic()
        for item in found:
            if item.session in self._live:  # two Pods claim one session: keep the first
                self.pool.discard(item.sandbox)
                continue
            lease = self.pool.adopt(item.sandbox)
            self._live[item.session] = Live(lease=lease, created=now, last_used=now)
            self._resumed.add(item.session)
            if item.kept:
                self._kept[item.session] = item.kept

    def _relieve(self) -> None:
        """Others wait for a sandbox while idle sessions hold them all: free one per waiter."""
        for _ in range(self.pool.waiting):
            if not self.pool.full or not self._make_room(None):
                return

    def _make_room(self, key: str | None) -> bool:
        """End the least recently used idle session, so that a new one need not wait for
        idle timeouts while every sandbox holds a session nobody is using."""
        idle = [
            (live.last_used, other)
            for other, live in self._live.items()
            if other != key and not self.lock(other).locked()
        ]
        if not idle:
            return False
        _, oldest = min(idle)
        # No await between choosing and ending: the session cannot start a run in between.
        live = self._live[oldest]
        if self._pausing_known() and live.lease.sandbox.alive:
            # Paused, it gives its sandbox back and its conversation loses nothing.
            self._pause_in_background(oldest, live)
            return True
        log.info("ending idle session %s to make room", oldest)
        self._drop(oldest, Ended(Ending.MADE_ROOM), save=True)
        return True

    async def _pausing(self) -> bool:
        """Whether sessions are paused rather than ended (idle, on shutdown)."""
        return self.pause_after_s > 0 and await self.pause_refusal() is None

    def _pausing_known(self) -> bool:
        """`_pausing`, as far as already checked (no await)."""
        return self.pause_after_s > 0 and self._pause_checked and self._pause_refusal is None

    def _take(self, key: str) -> Live | None:
        """Take the key's session out of the live ones (no await: no run starts meanwhile)."""
        self._resumed.discard(key)
        return self._live.pop(key, None)

    def _drop(self, key: str, reason: Ended | None, save: bool = False) -> None:
        """End a session; with `save` (it ended though its kernel was fine), its workspace is
        saved first, in the background, and the sandbox released after."""
        live = self._take(key)
        self._kept.pop(key, None)
        if live is None:
            return
        if reason is not None:
            self._endings[key] = reason
            self._endings.move_to_end(key)
            while len(self._endings) > REMEMBERED_ENDINGS:
                self._endings.popitem(last=False)
        self._end(key, live, save)

    def _end(self, key: str, live: Live, save: bool, pause_mb: int | None = None) -> None:
        """End a session already out of the live ones: with `save`, its workspace is saved
        first (and with `pause_mb` its sandbox paused), in the background, and the sandbox
        released after. With a ledger, only once its record is released: a sandbox another
        replica took over is let go of instead."""
        sandbox = live.lease.sandbox
        save = save and self.workspaces is not None and sandbox.alive
        if self.owners is None:
            if save:
                self.keeper.save_in_background(key, live, pause_mb=pause_mb)
            else:
                self.pool.release(sandbox)
            return
        task = asyncio.create_task(self._end_owned(key, live, save, pause_mb))
        self._ending[key] = task
        task.add_done_callback(lambda done: self._ended_one(key, done))
        if save:
            self.keeper.track(key, task)

    def _ended_one(self, key: str, task: asyncio.Task[None]) -> None:
        if self._ending.get(key) is task:
            del self._ending[key]

    async def _end_owned(self, key: str, live: Live, save: bool, pause_mb: int | None) -> None:
        sandbox = live.lease.sandbox
        if not await self.handover.release(key, sandbox):
            log.info("session %s: another replica holds its sandbox; let go of it", key)
            self.pool.hand_over(sandbox)
        elif save:
            await self.keeper.save_and_release(key, live, pause_mb=pause_mb)
        else:
            self.pool.release(sandbox)

    def _pause_in_background(self, key: str, live: Live) -> None:
        """Pause an idle session to a memory snapshot (its workspace saved with it); the
        next run resumes it. No await before the session is gone from the live ones."""
        log.info("pausing idle session %s to a memory snapshot", key)
        self._take(key)
        self._end(key, live, True, self.pause_max_mb)

    def stop(self, key: str) -> bool:
        """Interrupt the key's running run, and end the runs that wait to start (nothing of
        them runs); False when nothing runs or waits."""
        running = {found for k in (key, key + BESIDE) if (found := self._stops.get(k))}
        events = set(self._waiting_stops.get(key, ())) | running
        for event in events:
            event.set()
        return bool(events)

    async def close(self, key: str) -> None:
        """End the key's session on request (the next run starts afresh without a note),
        wherever it lives: one that another replica holds is taken over to be ended here."""
        async with self.lock(key):
            live = self._live.get(key)
            if live is not None and await self.handover.taken(key, live.lease.sandbox):
                self._forget(key)
            if key not in self._live:
                with contextlib.suppress(SandboxBusy):  # another replica is taking it now
                    await self._adopted(key)
            self._drop(key, None)
            self._endings.pop(key, None)
            await self.keeper.forget(key)

    async def _reap_loop(self) -> None:
        checks = max(1, round(self.reap_interval_s / TAKEOVER_CHECK_S)) if self.owners else 1
        while True:
            for _ in range(checks - 1):
                await asyncio.sleep(self.reap_interval_s / checks)
                await self._notice_takeovers()
            await asyncio.sleep(self.reap_interval_s / checks)
            await self.reap()

    async def reap(self) -> None:
        await self._notice_takeovers()
        now = time.monotonic()
        pausing = await self._pausing()
        for key, live in list(self._live.items()):
            if self.lock(key).locked():
                continue
            if pausing and now - live.last_used >= self.pause_after_s and live.lease.sandbox.alive:
                self._pause_in_background(key, live)
            elif now - live.last_used >= self.idle_timeout_s:
                self._drop(key, Ended(Ending.IDLE, self.idle_timeout_s), True)
            elif now - live.created >= self.max_lifetime_s:
                self._drop(key, Ended(Ending.LIFETIME, self.max_lifetime_s), True)
            elif not live.lease.sandbox.alive:
                self._drop(key, ending_of_sandbox(live.lease.sandbox))

    async def close_all(self, keep: bool = False) -> list[Sandbox]:
        """End every session; with `keep`, stop their runs (the kernels keep their state),
        except kept ones, which go on, and return their sandboxes instead of ending them,
        for a later process to adopt."""
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        for key in list(self._live):
            if not (keep and key in self._kept):
                self.stop(key)
        if not keep and self.workspaces is None:
            for key in list(self._live):
                self._drop(key, None)
        # Every session ends at once, each save within its own deadline: one that pickles
        # slowly loses only its own workspace, never another's, within the engine's grace.
        ended = await asyncio.gather(*(self._close_one(key, keep) for key in list(self._live)))
        await self.settle(self.shutdown_save_s)
        await self.keeper.finish(self.shutdown_save_s)
        return [sandbox for sandbox in ended if sandbox is not None]

    async def settle(self, timeout_s: float | None = None) -> None:
        """Wait (at most `timeout_s`) for the sessions being ended in the background: their
        records released, workspaces saved, sandboxes released or let go of."""
        pending = {*self._ending.values(), *self.keeper.saving.values()}
        if pending:
            await asyncio.wait(pending, timeout=timeout_s)

    async def _close_one(self, key: str, keep: bool) -> Sandbox | None:
        """End one session on shutdown (its run stopped): its workspace saved within
        `shutdown_save_s`, and its sandbox returned when kept, else released. A session whose
        run goes on for the next process is returned as it is (a save would wait for the
        run)."""
        if keep and key in self._kept:
            live = self._live.pop(key, None)
            return live.lease.sandbox if live is not None and live.lease.sandbox.alive else None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.limits.interrupt_grace_s + 5):
                await self.lock(key).acquire()  # the stopped run has ended
        live = self._live.pop(key, None)
        if live is None:
            return None
        sandbox = live.lease.sandbox
        if not await (self.handover.keeps(key) if keep else self.handover.release(key, sandbox)):
            self.pool.hand_over(sandbox)  # another replica's now: nothing saved or stopped
            return None
        try:
            if keep and sandbox.alive:
                if self.workspaces is not None:
                    # The fallback, should the next process not attach to it again (another
                    # secret, an engine restarted in between): its files and variables.
                    await self.keeper.save(key, live, self.shutdown_save_s)
                return sandbox
            if self.workspaces is not None and sandbox.alive:
                started = time.monotonic()
                # Where snapshots work, the session is paused too, within the same deadline:
                # the next process resumes it whole (its workspace, saved first, is the
                # fallback).
                pause_mb = self.pause_max_mb if await self._pausing() else None
                if await self.keeper.save(key, live, self.shutdown_save_s, pause_mb):
                    how = "paused" if live.paused else "saved"
                    log.info(
                        "%s session %s in %.1f s on shutdown",
                        how,
                        key,
                        time.monotonic() - started,
                    )
        except SandboxTaken:  # another replica attached meanwhile: it goes on there
            self.pool.hand_over(sandbox)
            return None
        if live.paused:
            self.pool.let_go(sandbox)
        else:
            self.pool.release(sandbox)
        return None


@contextlib.asynccontextmanager
async def _held(lock: asyncio.Lock) -> AsyncIterator[None]:
    """A lock already acquired, released at the end of the block."""
    try:
        yield
    finally:
        lock.release()
