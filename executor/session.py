"""Session mode: one live kernel per conversation key, so follow-ups reuse its state.

A session takes a fresh sandbox from the pool on its first run and keeps it until it is idle
too long, reaches its maximum lifetime, is closed, or its kernel or sandbox dies. The next
run then starts a new session and says so (`session_restarted`, with the reason in the
message). Runs on one key queue in order; different keys run in parallel.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import enum
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from executor.archive import OutputCaps, build_input_tar, build_workspace_tar
from executor.errors import FreezeFailed, InvalidInput, SandboxError, WorkspaceError
from executor.limits import SandboxLimits, is_bot_variable
from executor.models import (
    ExecutionResult,
    FileInfo,
    OutputCollector,
    OutputFile,
    SkippedFile,
    Status,
)
from executor.notebook import MB, output_caps, skipped_notes
from executor.pool import Lease, QueueCallback, SandboxPool
from executor.protocol import Recovered, Sandbox
from executor.run import (
    OutputCallback,
    RunOutcome,
    execute,
    judge,
    new_collector,
    truncation_note,
)
from executor.workspace import (
    Workspace,
    WorkspaceSettings,
    WorkspaceStore,
    ago,
    failure_reason,
    pack,
    restored_note,
    shown,
    unpack,
)

log = logging.getLogger(__name__)

REMEMBERED_ENDINGS = 10_000
REQUEST_TIMEOUT_S = 60.0
STOPPED_BEFORE_START = "The run was stopped before it started; nothing ran."
WORKSPACE_TIMEOUT_S = 150.0
"""Saving a workspace: the variables pickled in the kernel, then the files read."""
SHUTDOWN_SAVE_S = 20.0
"""On shutdown, how long every session's save may take, all of them at once."""
NAMES_SHOWN = 8
NAME_CHARS = 40
RESUMED_NOTE = (
    "The bot restarted since the last run; this session carried on, with its variables and files."
)
MAX_CHANGED_PATHS = 20_000
"""As many changed paths as the runner lists; more can only come from a forged event."""


class Restore(enum.Enum):
    """What a run (or /restore) may bring back of a saved workspace into a new session.

    Loading pickled variables runs code (unpickling calls what `__reduce__` names), so it
    is for the caller to allow, by the same rule as a run: files alone run nothing."""

    VARIABLES = "variables"
    """Files, then the variables."""
    FILES = "files"
    """Files only: a run then goes on without the variables, which are not loaded later."""


@dataclass(frozen=True, slots=True)
class Restored:
    """What /restore did, for the person who asked."""

    note: str
    withheld: tuple[str, ...] = ()
    """Saved variables not loaded (Restore.FILES); they still may be by a later restore."""


@dataclass(eq=False, slots=True)
class _Live:
    lease: Lease
    created: float
    last_used: float
    saved: Workspace | None = None
    """The saved workspace the session started with, while its variables are not loaded."""
    files_back: bool = False
    restored: str = ""
    """Why nothing more may be restored into this session ('' while something may): a
    restore happens at most once, so it never runs twice nor replaces newer variables."""
    ran: bool = False
    """Code ran in it (its variables are its own, not the saved ones)."""


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
    ) -> None:
        self.shutdown_save_s = shutdown_save_s
        """On shutdown, sessions' workspaces are saved at once, each within this long."""
        self.workspaces = workspaces
        """Where a session's workspace goes when it ends for any reason but a reset, to be
        restored into the next session of the same key; None: sessions end with nothing kept."""
        self.workspace_settings = workspace_settings or WorkspaceSettings()
        self.pool = pool
        self.limits = limits
        self.idle_timeout_s = idle_timeout_s
        self.max_lifetime_s = max_lifetime_s
        self.reap_interval_s = reap_interval_s
        self._live: dict[str, _Live] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._stops: dict[str, asyncio.Event] = {}
        self._waiting_stops: dict[str, set[asyncio.Event]] = {}
        """Stop events of runs that wait for the key's lock or a sandbox."""
        self._endings: OrderedDict[str, str] = OrderedDict()
        self._resumed: set[str] = set()
        """Sessions found again after a restart whose next run has not said so yet."""
        self._saving: dict[str, asyncio.Task[None]] = {}
        self._workspace_notes: dict[str, str] = {}
        """What the next run's message says about a workspace restored (or not)."""
        self._unsaved: set[str] = set()
        """Keys whose last save failed: their next session restores nothing (an older
        workspace is not what the user had)."""
        self._reaper: asyncio.Task[None] | None = None

    @property
    def active(self) -> list[str]:
        return list(self._live)

    def start(self) -> None:
        if self._reaper is None:
            self._reaper = asyncio.create_task(self._reap_loop(), name="cellmate-session-reaper")

    def _lock(self, key: str) -> asyncio.Lock:
        return self._locks.setdefault(key, asyncio.Lock())

    async def run(
        self,
        key: str,
        cells: Sequence[str],
        *,
        on_output: OutputCallback | None = None,
        on_queued: QueueCallback | None = None,
        stop: asyncio.Event | None = None,
        restore: Restore = Restore.VARIABLES,
        **overrides: Any,
    ) -> ExecutionResult:
        """Run cells in the key's session. `restore`: whether a saved workspace's variables
        may be loaded first (a new session's, with automatic restore on)."""
        limits = self._run_limits(overrides)
        stop = stop or asyncio.Event()
        # Until the run starts, a stop for the key ends its wait (behind another run, or for
        # a sandbox) and nothing runs.
        waiting = self._waiting_stops.setdefault(key, set())
        waiting.add(stop)
        try:
            async with self._lock(key):
                found = await _unless_stopped(self._session(key, on_queued), stop)
                if found is None:
                    return new_collector(limits).result(
                        Status.KILLED, STOPPED_BEFORE_START, runtime=limits.runtime
                    )
                waiting.discard(stop)
                result = await self._run_on(
                    key, found, cells, limits, on_output, on_queued, stop, restore
                )
        finally:
            waiting.discard(stop)
            if not waiting:
                self._waiting_stops.pop(key, None)
        self._relieve()
        return result

    async def _run_on(
        self,
        key: str,
        found: tuple[_Live, str | None],
        cells: Sequence[str],
        limits: SandboxLimits,
        on_output: OutputCallback | None,
        on_queued: QueueCallback | None,
        stop: asyncio.Event,
        restore: Restore,
    ) -> ExecutionResult:
        """Run cells in the key's live session (its lock held)."""
        live, ending = found
        self._stops[key] = stop
        collector = new_collector(limits)
        sandbox = live.lease.sandbox
        try:
            await self._before_run(key, live, restore)
            try:
                outcome = await execute(
                    sandbox, cells, limits, collector, on_output=on_output, stop=stop
                )
            except SandboxError:
                if collector.stdout or collector.results:
                    raise
                # The sandbox vanished before the code started: nothing ran, so run it in
                # a new session instead of failing.
                await self._end(key, "its sandbox had stopped")
                live, ending = await self._session(key, on_queued)
                await self._before_run(key, live, restore)
                sandbox = live.lease.sandbox
                outcome = await execute(
                    sandbox, cells, limits, collector, on_output=on_output, stop=stop
                )
        finally:
            self._stops.pop(key, None)
        live.last_used = time.monotonic()
        return await self._result(key, live, outcome, collector, limits, ending)

    async def _result(
        self,
        key: str,
        live: _Live,
        outcome: RunOutcome,
        collector: OutputCollector,
        limits: SandboxLimits,
        ending: str | None,
    ) -> ExecutionResult:
        sandbox = live.lease.sandbox
        files: list[OutputFile] = []
        skipped: list[SkippedFile] = []
        if outcome.sandbox_usable:
            status, message = judge(outcome, False, None, limits)
            files, skipped = await self._changed_files(live, outcome.changed, limits)
        else:
            state = await sandbox.exit_state()
            status, message = judge(outcome, state.oom_killed, state.exit_code, limits)
            await self._end(key, _why_it_ended(status.value, message, sandbox.alive))
        truncated = outcome.truncated or collector.truncated
        dropped = outcome.dropped_results + collector.dropped
        message = truncation_note(message, truncated, limits, dropped)
        workspace = self._workspace_notes.pop(key, None)
        if ending and workspace:
            message = f"This is a new session ({ending}). {workspace} {message}".strip()
        elif ending:
            message = (
                f"This is a new session ({ending}); earlier variables and files are gone. {message}"
            ).strip()
        elif workspace:
            message = f"{workspace} {message}".strip()
        elif key in self._resumed:
            self._resumed.discard(key)
            message = f"{RESUMED_NOTE} {message}".strip()
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
            workspace=workspace or "",
        )

    async def _changed_files(
        self, live: _Live, changed: list[str], limits: SandboxLimits
    ) -> tuple[list[OutputFile], list[SkippedFile]]:
        """The files the runner says changed, read from one archive of /mnt/data: the list
        only selects what to read, so a forged or stale list cannot reach outside it."""
        wanted: set[str] = set()
        skipped: list[SkippedFile] = []
        for path in changed[:MAX_CHANGED_PATHS]:
            if _safe_relative(path):
                wanted.add(_normal(path))
            elif len(skipped) < limits.max_output_files:
                skipped.append(SkippedFile(path=path[:200], reason="path leaves /mnt/data"))
        if not wanted:
            return [], skipped
        try:
            found = await live.lease.sandbox.get_files(output_caps(limits), wanted=wanted)
        except FreezeFailed as exc:  # the run's output still comes back, its files do not
            return [], [*skipped, SkippedFile(path="(files of this run)", reason=str(exc))]
        return found.files, skipped + skipped_notes(found, limits)

    async def _session(self, key: str, on_queued: QueueCallback | None) -> tuple[_Live, str | None]:
        """The key's live session, or a new one with the reason the previous one ended."""
        live = self._live.get(key)
        if live is not None and not live.lease.sandbox.alive:
            await self._end(key, _why_it_stopped(live.lease.sandbox))
            live = None
        if live is not None:
            return live, None
        if self.pool.full:
            self._make_room(key)
        lease = await self.pool.acquire(on_queued)
        now = time.monotonic()
        live = self._live[key] = _Live(lease=lease, created=now, last_used=now)
        # The runner keeps whose session it holds, for a later process to find it again.
        await lease.sandbox.send({"op": "claim", "session": key})
        if self.workspaces is not None:
            await self._start_from_saved(key, live)
        return live, self._endings.pop(key, None)

    async def _start_from_saved(self, key: str, live: _Live) -> None:
        """A new session of a key with a saved workspace: with automatic restore, its files
        come back at once (they run nothing); its variables wait for the first run, which
        loads them only when its caller allows (`Restore`)."""
        saved = await self._saved(key, started=True)
        if saved is None:
            return
        live.saved = saved
        if not self.workspace_settings.auto_restore:
            self._workspace_notes[key] = (
                f"A workspace from {ago(time.time() - saved.created)} is saved "
                f"({_shown(saved.names) or 'empty'}): /restore brings it back."
            )
            return
        await self._files_back(key, live)

    async def _files_back(self, key: str, live: _Live) -> None:
        saved = live.saved
        if saved is None or live.files_back:
            return
        live.files_back = True
        if saved.files:
            try:
                await live.lease.sandbox.put_files(
                    build_workspace_tar(saved.files, self.limits.uid, self.limits.gid)
                )
            except (SandboxError, InvalidInput) as exc:
                log.warning("could not restore the files of session %s: %s", key, exc)
                live.saved = None
                live.restored = "Your workspace could not be restored into this session"
                self._workspace_notes[key] = (
                    f"Your saved workspace could not be restored ({failure_reason(exc)}); "
                    "this session starts empty."
                )

    async def _before_run(self, key: str, live: _Live, restore: Restore) -> None:
        """The first run of a session that started from a saved workspace: its variables
        are loaded first when `restore` allows, else the session goes on without them."""
        live.ran = True
        saved = live.saved
        if saved is None or live.restored or not self._loads_by_run(live):
            return
        live.saved = None
        if restore is Restore.VARIABLES:
            self._workspace_notes[key] = await self._load_variables(key, live, saved)
        else:
            live.restored = "This session already ran code without the saved variables"
            self._workspace_notes[key] = _withheld_note(saved)

    async def _load_variables(self, key: str, live: _Live, saved: Workspace) -> str:
        """Unpickle the saved variables in the session's kernel (once: the session is marked
        restored first); what came back, for the user."""
        live.restored = "Your workspace was already restored into this session"
        await self._files_back(key, live)
        if not saved.saved:
            # No variable names were saved: nothing legitimate to load, so nothing is sent.
            return restored_note(saved, [], {})
        try:
            reply = await _ask_sandbox(
                live.lease.sandbox,
                {
                    "op": "restore",
                    "variables": base64.b64encode(saved.variables).decode(),
                    "cells": list(saved.cells),
                },
                "restored",
            )
        except TimeoutError:
            reply = {"error": "it took too long"}
        if reply is None or reply.get("error"):
            why = "no answer" if reply is None else str(reply["error"])
            log.warning("could not restore the variables of session %s: %s", key, why)
            return restored_note(saved, [], {name: why for name in saved.saved})
        failed = {str(k): str(v) for k, v in dict(reply.get("failed", {})).items()}
        restored = [str(name) for name in reply.get("restored", [])]
        return restored_note(saved, restored, failed)

    async def _saved(self, key: str, started: bool = False) -> Workspace | None:
        """The key's saved workspace once any save of it ended; None when there is none, it
        cannot be read (said in the next run's note when `started`), or its last save
        failed (an older one is not what the user had)."""
        pending = self._saving.get(key)
        if pending is not None:
            await asyncio.wait([pending])
        if key in self._unsaved:
            if started:
                self._unsaved.discard(key)
            return None
        settings = self.workspace_settings
        try:
            data = await self.workspaces.load(key) if self.workspaces is not None else None
            if data is None:
                return None
            return unpack(data, settings.max_files, settings.max_mb * MB + 1_000_000)
        except WorkspaceError as exc:
            log.warning("could not read the workspace of session %s: %s", key, exc)
            if started:
                self._workspace_notes[key] = (
                    f"Your saved workspace could not be restored ({failure_reason(exc)}); "
                    "this session starts empty."
                )
            return None

    async def restorable(self, key: str, by_run: bool = True) -> tuple[str, ...]:
        """The saved variables that loading would unpickle now: for a run (`by_run`, only
        with automatic restore), or for /restore; () when there are none."""
        if self.workspaces is None:
            return ()
        live = self._live.get(key)
        if live is not None and live.lease.sandbox.alive:
            if live.saved is None or live.restored or (by_run and not self._loads_by_run(live)):
                return ()
            return live.saved.saved
        if by_run and not self.workspace_settings.auto_restore:
            return ()
        saved = await self._saved(key)
        return saved.saved if saved is not None else ()

    def _loads_by_run(self, live: _Live) -> bool:
        """Whether the session's next run loads the saved variables (if allowed): with
        automatic restore, or once /restore brought back the files alone."""
        return self.workspace_settings.auto_restore or live.files_back

    async def restore(self, key: str, restore: Restore = Restore.VARIABLES) -> Restored:
        """Restore the key's saved workspace into its session now (starting one if needed),
        at most once per session; what came back, for the user."""
        if self.workspaces is None:
            return Restored("Workspaces are not kept here (CELLMATE_WORKSPACE_ENABLED is off).")
        async with self._lock(key):
            live, _ = await self._session(key, None)
            note = self._workspace_notes.pop(key, None)
            saved = live.saved
            if live.restored:
                return Restored(_not_again(live.restored))
            if saved is None:
                return Restored(note or "There is no saved workspace for this conversation.")
            await self._files_back(key, live)
            if live.restored:  # the files could not be put back
                return Restored(self._workspace_notes.pop(key, "") or _not_again(live.restored))
            if restore is Restore.FILES:
                return Restored(_withheld_note(saved), withheld=saved.saved)
            live.saved = None
            return Restored(await self._load_variables(key, live, saved))

    def adopt(self, found: Sequence[Recovered]) -> None:
        """Take on sessions an earlier process left running: their next run says so."""
        now = time.monotonic()
        for item in found:
            if item.session in self._live:  # two Pods claim one session: keep the first
                self.pool.discard(item.sandbox)
                continue
            lease = self.pool.adopt(item.sandbox)
            self._live[item.session] = _Live(lease=lease, created=now, last_used=now)
            self._resumed.add(item.session)

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
            if other != key and not self._lock(other).locked()
        ]
        if not idle:
            return False
        _, oldest = min(idle)
        log.info("ending idle session %s to make room", oldest)
        # No await between choosing and ending: the session cannot start a run in between.
        self._drop(oldest, "it was idle while another conversation needed a sandbox", save=True)
        return True

    async def _end(self, key: str, reason: str | None, save: bool = False) -> None:
        self._drop(key, reason, save)

    def _drop(self, key: str, reason: str | None, save: bool = False) -> None:
        """End a session; with `save` (it ended though its kernel was fine), its workspace is
        saved first, in the background, and the sandbox released after."""
        live = self._live.pop(key, None)
        self._resumed.discard(key)
        if live is None:
            return
        if reason is not None:
            self._endings[key] = reason
            self._endings.move_to_end(key)
            while len(self._endings) > REMEMBERED_ENDINGS:
                self._endings.popitem(last=False)
        sandbox = live.lease.sandbox
        if save and self.workspaces is not None and sandbox.alive:
            task = asyncio.create_task(self._save_then_release(key, live))
            self._saving[key] = task
            task.add_done_callback(lambda done: self._forget_saving(key, done))
            return
        self.pool.release(sandbox)

    def _forget_saving(self, key: str, task: asyncio.Task[None]) -> None:
        if self._saving.get(key) is task:
            del self._saving[key]

    async def _save_then_release(
        self, key: str, live: _Live, timeout_s: float = WORKSPACE_TIMEOUT_S
    ) -> None:
        try:
            await self._save(key, live, timeout_s)
        finally:
            self.pool.release(live.lease.sandbox)

    async def _save(self, key: str, live: _Live, timeout_s: float = WORKSPACE_TIMEOUT_S) -> bool:
        """Save the session's workspace within `timeout_s`; a failure is kept for the next
        run to mention (False). Saved variables that were never loaded into a session where no
        code ran are kept as they were (its kernel has none of its own)."""
        assert self.workspaces is not None
        limits = self.workspace_settings
        sandbox = live.lease.sandbox
        carried = live.saved if live.saved is not None and not live.ran else None
        try:
            async with asyncio.timeout(timeout_s):
                variables_cap = min(limits.max_variables_mb, limits.max_mb) * MB
                reply = await _ask_sandbox(
                    sandbox,
                    {"op": "snapshot", "max_bytes": variables_cap},
                    "snapshot",
                    timeout_s,
                )
                if reply is None or reply.get("error"):
                    why = "no answer" if reply is None else reply["error"]
                    raise WorkspaceError(f"the variables could not be saved ({why})")
                variables = base64.b64decode(str(reply.get("variables", "")))
                room = max(0, limits.max_mb * MB - len(variables))
                found = await sandbox.get_files(
                    OutputCaps(
                        max_files=limits.max_files,
                        max_file_bytes=room,
                        max_total_bytes=room,
                        max_depth=self.limits.max_output_depth,
                    )
                )
                skipped = {str(k): str(v) for k, v in dict(reply.get("skipped", {})).items()}
                for note in found.skipped:
                    skipped[note.path] = note.reason
                if found.not_listed:
                    skipped["other files"] = f"{found.not_listed} more, past the workspace cap"
                workspace = Workspace(
                    created=time.time(),
                    variables=variables,
                    saved=tuple(str(name) for name in reply.get("saved", [])),
                    skipped=skipped,
                    cells=tuple(str(cell) for cell in reply.get("cells", [])),
                    files={f.path: f.content for f in found.files},
                )
                if carried is not None:
                    workspace = dataclasses.replace(
                        workspace,
                        variables=carried.variables,
                        saved=carried.saved,
                        cells=carried.cells,
                        skipped={**carried.skipped, **workspace.skipped},
                    )
                await self.workspaces.save(key, pack(workspace))
                return True
        except (WorkspaceError, SandboxError, TimeoutError, ValueError) as exc:
            why = failure_reason(exc) if str(exc) else "it took too long"
            log.warning("could not save the workspace of session %s: %s", key, why)
            self._unsaved.add(key)
            self._workspace_notes[key] = (
                f"Your workspace could not be saved when the last session ended ({why}); "
                "earlier variables and files are gone."
            )
            # An older workspace would be restored in its place: it is not what the user had.
            with contextlib.suppress(WorkspaceError):
                await self.workspaces.delete(key)
            return False

    def stop(self, key: str) -> bool:
        """Interrupt the key's running run, and end the runs that wait to start (nothing of
        them runs); False when nothing runs or waits."""
        events = set(self._waiting_stops.get(key, ()))
        running = self._stops.get(key)
        if running is not None:
            events.add(running)
        for event in events:
            event.set()
        return bool(events)

    async def close(self, key: str) -> None:
        """End the key's session on request (the next run starts afresh without a note)."""
        async with self._lock(key):
            await self._end(key, None)
            self._endings.pop(key, None)
            self._workspace_notes.pop(key, None)
            pending = self._saving.pop(key, None)
            if pending is not None:
                await asyncio.wait([pending])
            if self.workspaces is not None:
                try:
                    await self.workspaces.delete(key)
                except WorkspaceError as exc:
                    log.warning("could not delete the workspace of session %s: %s", key, exc)

    async def put_files(self, key: str, files: Mapping[str, bytes]) -> None:
        """Put files into the session's /mnt/data; names may have folders (`in/a.csv`)."""
        tar = build_input_tar(
            files,
            self.limits.max_input_files,
            self.limits.max_input_total_mb * MB,
            self.limits.uid,
            self.limits.gid,
            folders=True,
        )
        async with self._lock(key):
            live, _ = await self._session(key, None)
            await live.lease.sandbox.put_files(tar)
            live.last_used = time.monotonic()

    async def list_files(self, key: str) -> list[tuple[str, int]]:
        async with self._lock(key):
            live = self._live.get(key)
            if live is None:
                return []
            found = await live.lease.sandbox.get_files(output_caps(self.limits))
            return [(f.path, f.size) for f in found.files]

    async def saved_files(self, key: str) -> list[tuple[str, int]] | None:
        """The files of the key's saved workspace (what its next session gets back), None
        when none is saved or it cannot be read."""
        saved = await self.saved_workspace(key)
        if saved is None:
            return None
        return sorted((path, len(content)) for path, content in saved.files.items())

    async def saved_workspace(self, key: str) -> Workspace | None:
        return await self._saved(key)

    async def get_file(self, key: str, path: str) -> bytes | None:
        if not _safe_relative(path):
            raise InvalidInput(f"file path {path!r} must be relative to /mnt/data, without '..'")
        async with self._lock(key):
            live = self._live.get(key)
            if live is None:
                return None
            found = await live.lease.sandbox.get_files(
                dataclasses.replace(output_caps(self.limits), max_files=1), wanted={_normal(path)}
            )
            return found.files[0].content if found.files else None

    async def files(self, key: str, path: str = "", recursive: bool = True) -> list[FileInfo]:
        """Entries under `path` in the session's /mnt/data ([] without a live session)."""
        reply = await self._files_op(key, "list", path, start=False, recursive=recursive)
        found = reply.get("entries", []) if reply else []
        return [entry for item in found if (entry := _file_info(item)) is not None]

    async def info(self, key: str, path: str) -> FileInfo | None:
        """One entry, None when it (or the session) does not exist."""
        try:
            reply = await self._files_op(key, "info", path, start=False)
        except InvalidInput:
            return None
        return _file_info(reply.get("entry")) if reply else None

    async def change_files(self, key: str, action: str, path: str, to: str = "") -> None:
        """make_dir, remove or rename (to `to`) in the session's /mnt/data."""
        if action not in ("make_dir", "remove", "rename"):
            raise InvalidInput(f"unknown file action {action!r}")
        await self._files_op(key, action, path, start=True, to=to)

    async def _files_op(
        self, key: str, action: str, path: str, start: bool, **extra: Any
    ) -> dict[str, Any] | None:
        for given in (path, str(extra.get("to", ""))):
            if given and not _safe_relative(given):
                raise InvalidInput(f"path {given!r} must be relative to /mnt/data, without '..'")
        async with self._lock(key):
            live = self._live.get(key)
            if live is None and not start:
                return None
            if live is None:
                live, _ = await self._session(key, None)
            try:
                reply = await _ask_sandbox(
                    live.lease.sandbox, {"op": "fs", "action": action, "path": path, **extra}, "fs"
                )
            except TimeoutError:
                raise SandboxError(f"the sandbox did not {action} in time") from None
            if reply is None:
                raise SandboxError(f"the sandbox stopped before it could {action}")
            live.last_used = time.monotonic()
        if reply.get("error"):
            raise InvalidInput(f"could not {action.replace('_', ' ')} {path!r}: {reply['error']}")
        return reply

    async def set_env(self, key: str, values: Mapping[str, str]) -> None:
        """Set environment variables in the session's kernel, for names the operator
        allowed (SandboxLimits.env_allowed); never the bot's own."""
        for name, value in values.items():
            if name not in self.limits.env_allowed or is_bot_variable(name):
                raise InvalidInput(
                    f"environment variable {name!r} is not allowed in sandboxes "
                    f"(allowed: {', '.join(self.limits.env_allowed) or 'none'})"
                )
            if len(value) > 4096 or "\x00" in value:
                raise InvalidInput(f"the value of {name!r} is too long or has a NUL byte")
        async with self._lock(key):
            live, _ = await self._session(key, None)
            reply = await _ask_sandbox(
                live.lease.sandbox, {"op": "env", "values": dict(values)}, "env"
            )
            if reply is None or not reply.get("ok"):
                raise SandboxError("the sandbox could not set the environment variables")

    async def export(self, key: str) -> Any:
        """The session's notebook (nbformat 4 JSON), or None without a live session."""
        reply = await self._ask(key, {"op": "export"}, "exported", "export the session")
        return None if reply is None else reply.get("content")

    async def preview(self, key: str, paths: Sequence[str]) -> dict[str, str]:
        """Short schema previews (columns, types, first rows) of tabular files in the session."""
        for path in paths:
            if not _safe_relative(path):
                raise InvalidInput(
                    f"file path {path!r} must be relative to /mnt/data, without '..'"
                )
        reply = await self._ask(
            key, {"op": "preview", "paths": list(paths)}, "previewed", "preview files"
        )
        found = None if reply is None else reply.get("previews")
        if not isinstance(found, dict):
            return {}
        return {str(k): str(v)[:3000] for k, v in found.items() if k in paths}

    async def _ask(
        self, key: str, request: dict[str, Any], reply_type: str, doing: str
    ) -> dict[str, Any] | None:
        """Send a request to the session's runner and wait for its reply (None: no session)."""
        async with self._lock(key):
            live = self._live.get(key)
            if live is None:
                return None
            try:
                reply = await _ask_sandbox(live.lease.sandbox, request, reply_type)
            except TimeoutError:
                raise SandboxError(
                    f"the sandbox did not {doing} within {REQUEST_TIMEOUT_S:g} s"
                ) from None
            if reply is None:
                raise SandboxError(f"the sandbox stopped before it could {doing}")
            return reply

    async def _reap_loop(self) -> None:
        while True:
            await asyncio.sleep(self.reap_interval_s)
            await self.reap()

    async def reap(self) -> None:
        now = time.monotonic()
        for key, live in list(self._live.items()):
            if self._lock(key).locked():
                continue
            if now - live.last_used >= self.idle_timeout_s:
                await self._end(
                    key, f"the previous one was idle for {_duration(self.idle_timeout_s)}", True
                )
            elif now - live.created >= self.max_lifetime_s:
                await self._end(
                    key,
                    f"the previous one reached its {_duration(self.max_lifetime_s)} lifetime",
                    True,
                )
            elif not live.lease.sandbox.alive:
                await self._end(key, _why_it_stopped(live.lease.sandbox))

    async def close_all(self, keep: bool = False) -> list[Sandbox]:
        """End every session; with `keep`, stop their runs (the kernels keep their state)
        and return their sandboxes instead of ending them, for a later process to adopt."""
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        for key in list(self._live):
            self.stop(key)
        if not keep and self.workspaces is None:
            for key in list(self._live):
                await self._end(key, None)
        # Every session ends at once, each save within its own deadline: one that pickles
        # slowly loses only its own workspace, never another's, within the engine's grace.
        ended = await asyncio.gather(*(self._close_one(key, keep) for key in list(self._live)))
        kept = [sandbox for sandbox in ended if sandbox is not None]
        if self._saving:
            _, late = await asyncio.wait(list(self._saving.values()), timeout=self.shutdown_save_s)
            for task in late:
                log.warning("a workspace save still running at shutdown was abandoned")
                task.cancel()
            if late:
                await asyncio.wait(late)
        return kept

    async def _close_one(self, key: str, keep: bool) -> Sandbox | None:
        """End one session on shutdown (its run stopped): its sandbox when kept, else its
        workspace saved within `shutdown_save_s` and its sandbox released."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.limits.interrupt_grace_s + 5):
                await self._lock(key).acquire()  # the stopped run has ended
        live = self._live.pop(key, None)
        if live is None:
            return None
        sandbox = live.lease.sandbox
        if keep and sandbox.alive:
            return sandbox
        if self.workspaces is not None and sandbox.alive:
            started = time.monotonic()
            if await self._save(key, live, self.shutdown_save_s):
                log.info("saved session %s in %.1f s on shutdown", key, time.monotonic() - started)
        self.pool.release(sandbox)
        return None

    def _run_limits(self, overrides: Mapping[str, Any]) -> SandboxLimits:
        limits = dataclasses.replace(self.limits, **overrides) if overrides else self.limits
        if limits.container_spec() != self.limits.container_spec():
            raise InvalidInput(
                "a session run can change only per-run limits (time, output); container limits "
                "(memory, CPU, runtime, network, sizes) are set for the executor"
            )
        return limits


async def _unless_stopped(
    waiting: Coroutine[Any, Any, tuple[_Live, str | None]], stop: asyncio.Event
) -> tuple[_Live, str | None] | None:
    """The session `waiting` gets, or None (and no session started) once `stop` is set."""
    if stop.is_set():
        waiting.close()
        return None
    getting = asyncio.ensure_future(waiting)
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({getting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if getting.done():
        return getting.result()
    getting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await getting
    return None


async def _ask_sandbox(
    sandbox: Sandbox, request: Mapping[str, Any], reply_type: str, timeout_s: float = 0
) -> dict[str, Any] | None:
    """Send a request to a runner and wait for its reply (None: the sandbox stopped first;
    TimeoutError past REQUEST_TIMEOUT_S, or `timeout_s`)."""
    request_id = uuid.uuid4().hex[:12]
    await sandbox.send({**request, "id": request_id})
    async with asyncio.timeout(timeout_s or REQUEST_TIMEOUT_S):
        while (event := await sandbox.receive()) is not None:
            if event.get("type") == reply_type and event.get("id") == request_id:
                return event
    return None


def _file_info(item: Any) -> FileInfo | None:
    if not isinstance(item, dict) or item.get("type") not in ("file", "dir", "link"):
        return None
    path = str(item.get("path", ""))
    if not _safe_relative(path):
        return None
    size, modified = item.get("size"), item.get("modified")
    return FileInfo(
        path=path,
        type=item["type"],
        size=size if isinstance(size, int) and size >= 0 else 0,
        modified=float(modified) if isinstance(modified, int | float) else 0.0,
    )


def _safe_relative(path: str) -> bool:
    parts = PurePosixPath(path).parts
    return (
        bool(parts)
        and not PurePosixPath(path).is_absolute()
        and ".." not in parts
        and "\x00" not in path
    )


def _normal(path: str) -> str:
    return "/".join(PurePosixPath(path).parts)


def _why_it_ended(status: str, message: str, alive: bool) -> str:
    if status == "memory":
        return "the previous one ran out of memory"
    if status == "timeout":
        return "the previous run was stopped at the time limit"
    if "stopped on request" in message:
        return "the previous run was stopped on request"
    if message.startswith("The sandbox stopped") or not alive:
        # The whole sandbox went (deleted from outside; under gVisor the kernel may be
        # reported dead first as everything in it ends).
        return "its sandbox had stopped"
    return "the previous one's kernel died"


def _why_it_stopped(sandbox: Sandbox) -> str:
    # A backend that cut a sandbox off for writing outside its protocol says so.
    if getattr(sandbox, "flooded", False):
        return "its sandbox wrote too much outside its protocol and was stopped"
    return "its sandbox had stopped"


def _duration(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def _shown(names: Sequence[str]) -> str:
    """Names for a one-line note: the first few, each cut short, and how many more."""
    cut = [shown(name, NAME_CHARS) for name in names]
    more = len(cut) - NAMES_SHOWN
    return ", ".join(cut[:NAMES_SHOWN]) + (f" and {more} more" if more > 0 else "")


def _withheld_note(saved: Workspace) -> str:
    """A workspace's files came back and its variables were not loaded."""
    when = ago(time.time() - saved.created)
    files = f" ({_shown(sorted(saved.files))})" if saved.files else ""
    line = f"The files of your workspace from {when} are back{files}"
    if saved.saved:
        line += f"; its variables were not loaded: {_shown(saved.saved)}"
    return line + "."


def _not_again(why: str) -> str:
    return (
        f"{why}; a workspace is restored at most once per session (again, it would replace "
        "newer variables with older ones)."
    )
