"""A live session's workspace: saved when the session ends, brought back (files at once,
variables when a run or /restore allows) into the conversation's next session."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

from executor.archive import OutputCaps, build_workspace_tar
from executor.errors import (
    ExecutorError,
    InvalidInput,
    SandboxError,
    SandboxTaken,
    WorkspaceError,
)
from executor.limits import SandboxLimits
from executor.notebook import MB
from executor.pool import SandboxPool
from executor.protocol import PausedSandbox, SnapshotKeeper
from executor.run_scope import TITLES
from executor.runner_client import RunnerClient
from executor.session_live import Live, LiveSessions, Restore
from executor.session_news import Held, WorkspaceEvent, WorkspaceNews
from executor.wire import pins
from executor.workspace import (
    Workspace,
    WorkspaceSettings,
    WorkspaceStore,
    in_r,
    names_a_variable,
    pack,
    unpack,
)

log = logging.getLogger(__name__)

WORKSPACE_TIMEOUT_S = 150.0
"""Saving a workspace: the variables pickled in the kernel, then the files read."""
INSTALL_TIMEOUT_S = 660.0
"""Installing a restored workspace's packages again (the runner gives pip 600 s)."""


@dataclass(frozen=True, slots=True)
class Restored:
    """What /restore did, for the person who asked."""

    news: WorkspaceNews
    withheld: tuple[str, ...] = ()
    """Saved variables not loaded (Restore.FILES); they still may be by a later restore."""


class WorkspaceKeeper:
    """Saves and restores the workspaces of a session manager's sessions."""

    def __init__(
        self,
        sessions: LiveSessions,
        pool: SandboxPool,
        limits: SandboxLimits,
        store: WorkspaceStore | None,
        settings: WorkspaceSettings,
    ) -> None:
        self.sessions = sessions
        self.pool = pool
        self.limits = limits
        self.store = store
        self.settings = settings
        self.saving: dict[str, asyncio.Task[None]] = {}
        self.notes: dict[str, WorkspaceNews] = {}
        """What the next run tells about a workspace restored (or not)."""
        self.unsaved: set[str] = set()
        """Keys whose last save failed: their next session restores nothing (an older
        workspace is not what the user had)."""
        self.snapshot_why: dict[str, str] = {}
        """Why a key's session could not be paused to, or resumed from, a memory snapshot
        (its workspace came back instead): for its next run's note."""

    async def resume(self, key: str) -> Live | None:
        """The key's session resumed from the memory snapshot it was paused to, with its
        files put back; None when it has none, or it cannot be resumed (then the workspace
        saved with it comes back as usual, and the next run says why)."""
        saved = await self._saved(key)
        if saved is None or saved.paused is None:
            return None
        backend = self.pool.backend
        if not isinstance(backend, SnapshotKeeper):
            self.snapshot_why[key] = "this executor cannot resume memory snapshots"
            return None
        try:
            sandbox = await backend.resume(saved.paused, key)
        except ExecutorError as exc:
            log.warning("could not resume session %s from its snapshot: %s", key, exc)
            self.snapshot_why[key] = f"it could not be resumed: {exc}"
            return None
        now = time.monotonic()
        # Its kernel holds everything it had: nothing more is ever restored into it.
        live = Live(
            lease=self.pool.adopt(sandbox),
            created=now,
            last_used=now,
            files_back=True,
            restored=Held.RESTORED,
            ran=True,
        )
        # Every variable is in the kernel, pickled or not; what is missing are the files the
        # workspace could not hold (the data folder is emptied by the pause).
        missing = {name: why for name, why in saved.skipped.items() if not names_a_variable(name)}
        back = tuple(sorted(saved.files))
        if saved.files:
            try:
                await sandbox.put_files(
                    build_workspace_tar(saved.files, self.limits.uid, self.limits.gid)
                )
            except (SandboxError, InvalidInput) as exc:
                log.warning("could not put back the files of session %s: %s", key, exc)
                missing["files"] = str(exc)
                back = ()
        self.notes[key] = WorkspaceNews(
            WorkspaceEvent.RESUMED, saved.paused.paused_at, back, missing=missing
        )
        return live

    async def started(self, key: str, live: Live) -> None:
        """A new session of a key with a saved workspace: with automatic restore, its files
        come back at once (they run nothing); its variables wait for the first run, which
        loads them only when its caller allows (`Restore`)."""
        saved = await self._saved(key, started=True)
        if saved is None:
            return
        live.saved = saved
        if not self.settings.auto_restore:
            self.notes[key] = WorkspaceNews(
                WorkspaceEvent.WAITING, saved.created, names=tuple(saved.names)
            )
            return
        await self._files_back(key, live)

    async def _files_back(self, key: str, live: Live) -> None:
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
                live.restored = Held.FAILED
                self.notes[key] = WorkspaceNews(WorkspaceEvent.NOT_RESTORED, why=str(exc))
                return
        if saved.packages:
            live.packages = await self._reinstall(key, live, saved.packages)

    async def _reinstall(self, key: str, live: Live, packages: tuple[str, ...]) -> WorkspaceNews:
        """Install the packages a saved workspace had again (before its variables, which
        may be of their classes); what came of it, as the package fields of a note."""
        if self.limits.egress != "allowlist":
            why = "sandboxes have no network here"
        else:
            try:
                reply = await RunnerClient(live.lease.sandbox).install(packages, INSTALL_TIMEOUT_S)
                why = "no answer" if reply is None else "" if reply.ok else reply.error or "failed"
            except TimeoutError:
                why = "it took too long"
        if not why:
            return WorkspaceNews(WorkspaceEvent.RESTORED, packages=packages)
        log.warning("could not install the packages of session %s again: %s", key, why)
        return WorkspaceNews(WorkspaceEvent.RESTORED, packages_missing=packages, packages_why=why)

    def _note(self, live: Live, news: WorkspaceNews) -> WorkspaceNews:
        """`news` of a restore, with what became of the workspace's packages."""
        if live.packages is None:
            return news
        found = live.packages
        return dataclasses.replace(
            news,
            packages=found.packages,
            packages_missing=found.packages_missing,
            packages_why=found.packages_why,
        )

    async def before_run(self, key: str, live: Live, restore: Restore) -> None:
        """The first run of a session that started from a saved workspace: its variables
        are loaded first when `restore` allows, else the session goes on without them."""
        live.ran = True
        saved = live.saved
        if saved is None or live.restored is not None or not self._loads_by_run(live):
            return
        live.saved = None
        if restore is Restore.VARIABLES:
            self.notes[key] = self._note(live, await self._load_variables(key, live, saved))
        else:
            live.restored = Held.RAN_WITHOUT
            self.notes[key] = self._note(live, _withheld(saved))

    async def _load_variables(self, key: str, live: Live, saved: Workspace) -> WorkspaceNews:
        """Unpickle the saved variables in the session's kernel (once: the session is marked
        restored first); what came back."""
        live.restored = Held.RESTORED
        await self._files_back(key, live)
        if not saved.variable_names:
            # No variable names were saved: nothing legitimate to load, so nothing is sent.
            return restored_news(saved, [], {})
        variables = base64.b64encode(saved.variables).decode() if saved.saved else ""
        r_variables = base64.b64encode(saved.r_variables).decode() if saved.r_saved else ""
        try:
            reply = await RunnerClient(live.lease.sandbox).restore(
                variables, saved.cells, r_variables
            )
            why = "no answer" if reply is None else reply.error
        except TimeoutError:
            reply, why = None, "it took too long"
        if reply is None or why:
            log.warning("could not restore the variables of session %s: %s", key, why)
            return restored_news(saved, [], {name: str(why) for name in saved.variable_names})
        restored = [*reply.restored, *(in_r(name) for name in reply.r_restored)]
        failed = {**reply.failed, **{in_r(name): why for name, why in reply.r_failed.items()}}
        return restored_news(saved, restored, failed)

    async def _saved(self, key: str, started: bool = False) -> Workspace | None:
        """The key's saved workspace once any save of it ended; None when there is none, it
        cannot be read (said in the next run's note when `started`), or its last save
        failed (an older one is not what the user had)."""
        pending = self.saving.get(key)
        if pending is not None:
            await asyncio.wait([pending])
        if key in self.unsaved:
            if started:
                self.unsaved.discard(key)
            return None
        settings = self.settings
        try:
            data = await self.store.load(key) if self.store is not None else None
            if data is None:
                return None
            return unpack(data, settings.max_files, settings.max_mb * MB + 1_000_000)
        except WorkspaceError as exc:
            log.warning("could not read the workspace of session %s: %s", key, exc)
            if started:
                self.notes[key] = WorkspaceNews(WorkspaceEvent.NOT_RESTORED, why=str(exc))
            return None

    async def restorable(self, key: str, by_run: bool = True) -> tuple[str, ...]:
        """The saved variables that loading would unpickle now: for a run (`by_run`, only
        with automatic restore), or for /restore; () when there are none."""
        if self.store is None:
            return ()
        live = self.sessions.live(key)
        if live is not None and live.lease.sandbox.alive:
            held = live.restored is not None or (by_run and not self._loads_by_run(live))
            if live.saved is None or held:
                return ()
            return live.saved.variable_names
        if by_run and not self.settings.auto_restore:
            return ()
        saved = await self._saved(key)
        return saved.variable_names if saved is not None else ()

    def _loads_by_run(self, live: Live) -> bool:
        """Whether the session's next run loads the saved variables (if allowed): with
        automatic restore, or once /restore brought back the files alone."""
        return self.settings.auto_restore or live.files_back

    async def restore(self, key: str, restore: Restore = Restore.VARIABLES) -> Restored:
        """Restore the key's saved workspace into its session now (starting one if needed),
        at most once per session; what came back."""
        if self.store is None:
            return Restored(WorkspaceNews(WorkspaceEvent.NOT_KEPT))
        async with self.sessions.lock(key):
            live = await self.sessions.open(key)
            note = self.notes.pop(key, None)
            saved = live.saved
            if live.restored is not None:
                return Restored(WorkspaceNews(WorkspaceEvent.HELD, held=live.restored))
            if saved is None:
                return Restored(note or WorkspaceNews(WorkspaceEvent.NONE_SAVED))
            await self._files_back(key, live)
            if live.restored is not None:  # the files could not be put back
                held = WorkspaceNews(WorkspaceEvent.HELD, held=live.restored)
                return Restored(self.notes.pop(key, None) or held)
            if restore is Restore.FILES:
                return Restored(self._note(live, _withheld(saved)), withheld=saved.variable_names)
            live.saved = None
            return Restored(self._note(live, await self._load_variables(key, live, saved)))

    async def saved_files(self, key: str) -> list[tuple[str, int]] | None:
        """The files of the key's saved workspace (what its next session gets back), None
        when none is saved or it cannot be read."""
        saved = await self.saved_workspace(key)
        if saved is None:
            return None
        return sorted((path, len(content)) for path, content in saved.files.items())

    async def saved_workspace(self, key: str) -> Workspace | None:
        return await self._saved(key)

    def save_in_background(self, key: str, live: Live, pause_mb: int | None = None) -> None:
        """Save the ended session's workspace, then release its sandbox; with `pause_mb`,
        pause the sandbox to a memory snapshot of at most that size first (see `save`)."""
        self.track(key, asyncio.create_task(self.save_and_release(key, live, pause_mb=pause_mb)))

    def track(self, key: str, task: asyncio.Task[None]) -> None:
        """A save of the key's workspace going on in `task`: the next session waits for it."""
        self.saving[key] = task
        task.add_done_callback(lambda done: self._forget_saving(key, done))

    def _forget_saving(self, key: str, task: asyncio.Task[None]) -> None:
        if self.saving.get(key) is task:
            del self.saving[key]

    async def save_and_release(
        self,
        key: str,
        live: Live,
        timeout_s: float = WORKSPACE_TIMEOUT_S,
        pause_mb: int | None = None,
    ) -> None:
        taken = False
        try:
            await self.save(key, live, timeout_s, pause_mb)
        except SandboxTaken:
            # Another replica attached meanwhile: it holds the session now, nothing is saved.
            taken = True
        finally:
            if taken:
                self.pool.hand_over(live.lease.sandbox)
            elif live.paused:
                self.pool.let_go(live.lease.sandbox)
            else:
                self.pool.release(live.lease.sandbox)

    async def save(
        self,
        key: str,
        live: Live,
        timeout_s: float = WORKSPACE_TIMEOUT_S,
        pause_mb: int | None = None,
    ) -> bool:
        """Save the session's workspace within `timeout_s`; a failure is kept for the next
        run to mention (False). Saved variables that were never loaded into a session where no
        code ran are kept as they were (its kernel has none of its own).

        With `pause_mb`, the sandbox is then paused to a memory snapshot (`live.paused`)
        within what is left of `timeout_s`, and the workspace is saved again naming it, for
        the next run to resume; the files and variables saved first are what comes back if
        it cannot be. A sandbox that cannot be paused keeps that workspace, and the next run
        says why."""
        assert self.store is not None
        limits = self.settings
        sandbox = live.lease.sandbox
        carried = live.saved if live.saved is not None and not live.ran else None
        deadline = time.monotonic() + timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                variables_cap = min(limits.max_variables_mb, limits.max_mb) * MB
                reply = await RunnerClient(sandbox).snapshot(variables_cap, timeout_s)
                if reply is None or reply.error:
                    why = "no answer" if reply is None else reply.error
                    raise WorkspaceError(f"the variables could not be saved ({why})")
                variables = base64.b64decode(reply.variables)
                r_variables = base64.b64decode(reply.r_variables)
                room = max(0, limits.max_mb * MB - len(variables) - len(r_variables))
                found = await sandbox.get_files(
                    OutputCaps(
                        max_files=limits.max_files,
                        max_file_bytes=room,
                        max_total_bytes=room,
                        max_depth=self.limits.max_output_depth,
                    )
                )
                skipped = dict(reply.skipped)
                skipped.update((in_r(name), why) for name, why in reply.r_skipped.items())
                for note in found.skipped:
                    skipped[note.path] = note.reason
                if found.not_listed:
                    skipped["other files"] = f"{found.not_listed} more, past the workspace cap"
                for language in sorted(live.languages - {"r"}):
                    skipped[f"{TITLES[language]} variables"] = (
                        "only Python's and R's variables are kept; the files are"
                    )
                workspace = Workspace(
                    created=time.time(),
                    variables=variables,
                    saved=reply.saved,
                    skipped=skipped,
                    cells=reply.cells,
                    files={f.path: f.content for f in found.files},
                    r_variables=r_variables,
                    r_saved=reply.r_saved,
                    # Packages that could not be installed again stay listed for the next.
                    packages=pins(
                        reply.packages
                        + (live.packages.packages_missing if live.packages else ())
                        + (carried.packages if carried else ())
                    ),
                )
                if carried is not None:
                    workspace = dataclasses.replace(
                        workspace,
                        variables=carried.variables,
                        saved=carried.saved,
                        r_variables=carried.r_variables,
                        r_saved=carried.r_saved,
                        cells=carried.cells,
                        skipped={**carried.skipped, **workspace.skipped},
                    )
                await self.store.save(key, pack(workspace))
        except (WorkspaceError, SandboxError, TimeoutError, ValueError) as exc:
            why = str(exc)
            log.warning(
                "could not save the workspace of session %s: %s", key, why or "it took too long"
            )
            self.unsaved.add(key)
            self.notes[key] = WorkspaceNews(WorkspaceEvent.NOT_SAVED, why=why)
            # An older workspace would be restored in its place: it is not what the user had.
            with contextlib.suppress(WorkspaceError):
                await self.store.delete(key)
            return False
        if pause_mb is not None:
            await self._pause(key, live, workspace, pause_mb, deadline - time.monotonic())
        return True

    async def _pause(
        self, key: str, live: Live, workspace: Workspace, max_mb: int, within_s: float
    ) -> None:
        """Pause the session's sandbox to a memory snapshot (`live.paused`) and name it in the
        workspace, which is already saved: a pause that fails, or takes longer than
        `within_s`, leaves that workspace as it is, and the next run says why."""
        backend = self.pool.backend
        if not isinstance(backend, SnapshotKeeper) or self.store is None:
            return
        if live.secret_given:
            # A memory snapshot would hold the answer on the host's disk.
            self.snapshot_why[key] = "it was given a getpass() answer, which is never saved"
            return
        try:
            async with asyncio.timeout(max(within_s, 0.001)):
                paused = await backend.pause(live.lease.sandbox, max_mb)
        except (ExecutorError, TimeoutError) as exc:
            # A checkpoint still under way when time ran out stops a sandbox that nothing
            # names: it is released (removed) with the session.
            why = str(exc) or "it took too long"
            log.warning("could not pause session %s to a snapshot: %s", key, why)
            self.snapshot_why[key] = f"it could not be paused: {why}"
            return
        live.paused = True
        try:
            await self.store.save(key, pack(dataclasses.replace(workspace, paused=paused)))
        except WorkspaceError as exc:
            # Nothing names the snapshot: it can never be resumed.
            await self._drop_snapshot(paused)
            self.snapshot_why[key] = f"it could not be recorded: {exc}"

    async def _drop_snapshot(self, paused: PausedSandbox | None) -> None:
        backend = self.pool.backend
        if paused is not None and isinstance(backend, SnapshotKeeper):
            try:
                await backend.remove_paused(paused)
            except ExecutorError as exc:
                log.warning("could not remove a paused sandbox: %s", exc)

    async def forget(self, key: str) -> None:
        """The key's session was closed on request: its workspace is not kept, nor the
        snapshot it was paused to."""
        self.notes.pop(key, None)
        self.snapshot_why.pop(key, None)
        pending = self.saving.pop(key, None)
        if pending is not None:
            await asyncio.wait([pending])
        saved = await self._saved(key)
        if saved is not None:
            await self._drop_snapshot(saved.paused)
        if self.store is not None:
            try:
                await self.store.delete(key)
            except WorkspaceError as exc:
                log.warning("could not delete the workspace of session %s: %s", key, exc)

    async def finish(self, timeout_s: float) -> None:
        """On shutdown: the saves still running get `timeout_s` to end, then are abandoned."""
        if self.saving:
            _, late = await asyncio.wait(list(self.saving.values()), timeout=timeout_s)
            for task in late:
                log.warning("a workspace save still running at shutdown was abandoned")
                task.cancel()
            if late:
                await asyncio.wait(late)


def _withheld(saved: Workspace) -> WorkspaceNews:
    """A workspace's files came back and its variables were not loaded."""
    files = tuple(sorted(saved.files))
    return WorkspaceNews(
        WorkspaceEvent.FILES_BACK, saved.created, files, withheld=saved.variable_names
    )


def restored_news(
    workspace: Workspace, restored: list[str], failed: Mapping[str, str]
) -> WorkspaceNews:
    """What came back of `workspace` (its files, and the variables `restored`) and what did
    not, with why: what it skipped when saved, and what `failed` to load."""
    came_back = set(restored)
    back = [name for name in workspace.names if name in came_back or name in workspace.files]
    missing = {**workspace.skipped, **failed}
    return WorkspaceNews(WorkspaceEvent.RESTORED, workspace.created, tuple(back), missing=missing)
