"""The executor: the one object callers hold to run code in sandboxes."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Self

from executor.backends import build_backend
from executor.docker_backend import DockerBackend
from executor.limits import SandboxLimits
from executor.models import ExecutionResult, FileInfo
from executor.notebook import run_notebook
from executor.ownership import Owner, SessionOwners
from executor.pool import QueueCallback, SandboxPool
from executor.protocol import Recovered, SandboxBackend, SessionKeeper
from executor.run import OutputCallback
from executor.run_input import InputCallback, RunClock
from executor.run_scope import run_scope
from executor.session import SHUTDOWN_SAVE_S, Restore, Restored, SessionManager
from executor.session_news import WorkspaceNews
from executor.session_streams import CHUNK_BYTES
from executor.workspace import WorkspaceSettings, WorkspaceStore

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class PoolSettings:
    size: int = 2
    """Fresh sandboxes kept ready ahead of demand (0: start each on demand)."""
    max_live: int = 20
    """Sandboxes that may exist at once: ready, starting, or in use by a run or a session."""
    queue_limit: int = 50
    """Callers that may wait for a slot; past this they get SandboxBusy."""
    idle_timeout_s: float = 900.0
    """A session that ran nothing this long ends (its variables and files are gone)."""
    max_lifetime_s: float = 4 * 3600.0
    """A session ends this long after it started, however busy."""
    shutdown_save_s: float = SHUTDOWN_SAVE_S
    """On shutdown, every session's workspace is saved at once, each within this long (a
    slower one is not saved); with the turns' grace it must fit the engine's stop grace."""
    pause_after_s: float = 300.0
    """`CELLMATE_SESSION_PAUSE_AFTER_S`: under gVisor (runsc) on an engine that can take
    checkpoints, a session idle this long is paused to a memory snapshot instead of waiting
    for its idle timeout: it holds no memory, and its next run resumes it with everything
    it had, even what cannot be pickled. 0: never pause (idle sessions end as before)."""
    pause_max_mb: int = 4096
    """`CELLMATE_SESSION_PAUSE_MAX_MB`: a sandbox using more memory is not paused; its
    workspace (files and pickled variables) is saved instead."""
    template: bool = True
    """`CELLMATE_POOL_TEMPLATE`: under gVisor on an engine with checkpoints, cold sandboxes
    are clones restored from a warmed template (one per image and limits: numpy, pandas and
    matplotlib imported, a first figure drawn), each with its own key and random generators,
    instead of a kernel started and warmed again. The template holds one sandbox's memory,
    and two primed clones (a checkpoint each, on the engine's disk) wait beside it. Under
    runc, on Kubernetes, with network access or without checkpoints, it does nothing."""

    def __post_init__(self) -> None:
        if self.size < 0 or self.max_live < 1 or self.queue_limit < 0:
            raise ValueError("pool size and queue_limit must be >= 0, and max_live >= 1")
        if self.idle_timeout_s <= 0 or self.max_lifetime_s <= 0 or self.shutdown_save_s <= 0:
            raise ValueError("idle_timeout_s, max_lifetime_s and shutdown_save_s must be positive")
        if self.pause_after_s < 0 or self.pause_max_mb < 1:
            raise ValueError("pause_after_s must be >= 0 and pause_max_mb at least 1")


class Executor:
    """Checks the engine and image on entry, removes leftovers of crashed runs, keeps a warm
    pool, runs one-off notebooks and keyed sessions; on exit removes every sandbox. With a
    backend that keeps sessions (SessionKeeper), sessions' sandboxes outlive the process
    instead: the next one of the same instance attaches to them again."""

    def __init__(
        self,
        image: str,
        limits: SandboxLimits | None = None,
        backend: SandboxBackend | None = None,
        instance: str = "default",
        pool: PoolSettings | None = None,
        workspaces: WorkspaceStore | None = None,
        workspace_settings: WorkspaceSettings | None = None,
        owners: SessionOwners | None = None,
    ) -> None:
        """`workspaces`: where a session's workspace is saved when it ends (but on a reset),
        and restored from into the next session of the same key. `owners`: the ledger of
        which replica holds each session, where several share one database: a session
        moves to the replica its conversation's next turn reaches, sandbox and all."""
        self.limits = limits or SandboxLimits()
        self.backend: SandboxBackend = backend or build_backend("docker", image, instance=instance)
        settings = pool or PoolSettings()
        self.pool = SandboxPool(
            self.backend, self.limits, settings.size, settings.max_live, settings.queue_limit
        )
        self.sessions = SessionManager(
            self.pool,
            self.limits,
            settings.idle_timeout_s,
            settings.max_lifetime_s,
            workspaces=workspaces,
            workspace_settings=workspace_settings,
            shutdown_save_s=settings.shutdown_save_s,
            pause_after_s=settings.pause_after_s,
            pause_max_mb=settings.pause_max_mb,
        )
        # Sessions move between replicas only where a replica can attach to another one's
        # sandboxes (a shared session secret); else each replica keeps its own, as before.
        self.owners = self.sessions.owners = owners if self.keeps_sessions else None
        if isinstance(self.backend, DockerBackend):
            self.backend.templates_enabled = settings.template
            if workspace_settings is not None:
                self.backend.paused_retention_s = workspace_settings.retention_days * 86400

    @property
    def keeps_sessions(self) -> bool:
        """Whether live sessions, and kept runs, outlive this process (the next one with
        the same instance and secret attaches to them again)."""
        return self._keeper is not None

    @property
    def _keeper(self) -> SessionKeeper | None:
        backend = self.backend
        return backend if isinstance(backend, SessionKeeper) and backend.keeps_sessions else None

    async def __aenter__(self) -> Self:
        try:
            await self.backend.check(self.limits.runtime)
            others = await self._others()
            found = await self._keeper.recover(skip=others) if self._keeper is not None else []
            found = await self._owned(found)
            # Read again, after: another replica may have taken one of this label's sessions
            # over while this one attached and checked (a rolling update under traffic).
            keep = {f.sandbox.id for f in found} | others | await self._named()
            removed = await self.backend.remove_leftovers(keep=keep)
            if found:
                log.info("attached again to %d session(s) an earlier run left going", len(found))
            if removed:
                log.warning("removed %d sandbox(es) left behind by an earlier run", removed)
        except BaseException:
            await self.backend.close()
            raise
        self.sessions.adopt(found)
        self.pool.start()
        self.sessions.start()
        return self

    async def _others(self) -> set[str]:
        """The sandboxes other replicas hold (never touched here); none without a ledger."""
        if self.owners is None:
            return set()
        return await asyncio.to_thread(self.owners.others)

    async def _named(self) -> set[str]:
        """Every sandbox the ledger names (never a leftover); none without a ledger."""
        if self.owners is None:
            return set()
        return await asyncio.to_thread(self.owners.named)

    async def _owned(self, found: list[Recovered]) -> list[Recovered]:
        """With a ledger, the sessions this replica holds: those recovered by its label
        that no other replica took, recorded, and those it took over from another replica
        (labelled with that one's instance), attached to by id."""
        keeper, owners = self._keeper, self.owners
        if owners is None or keeper is None:
            return found
        mine = await asyncio.to_thread(owners.mine)
        kept: list[Recovered] = []
        for item in found:
            key, sandbox = item.session, item.sandbox.id
            owner = await asyncio.to_thread(owners.owner, key)
            if owner is None:
                await asyncio.to_thread(owners.record, key, sandbox)
                kept.append(item)
            elif owner == Owner(sandbox, owners.replica) and await asyncio.to_thread(
                owners.take, key, sandbox, owners.replica
            ):  # still this replica's: by compare-and-set, as another may take it meanwhile
                kept.append(item)
            else:  # another replica's now, or a newer session of the key exists
                await keeper.detach(item.sandbox)
        ids = {item.sandbox.id for item in kept}
        for key, sandbox in mine.items():
            if sandbox in ids:
                continue
            if await asyncio.to_thread(owners.owner, key) != Owner(sandbox, owners.replica):
                continue  # taken over (or ended) since `mine` was read: not this one's
            adopted = await keeper.adopt(sandbox)
            if adopted is not None and adopted.session == key:
                if await asyncio.to_thread(owners.take, key, sandbox, owners.replica):
                    kept.append(adopted)
                else:  # taken over while this one attached: the other replica's
                    await keeper.detach(adopted.sandbox)
                continue
            if adopted is None:
                # No answer now is not gone: it may be busy with another host, or slow to
                # attach on a loaded cluster. The record stays (and spares the sandbox from
                # the sweep); the key's next turn attaches again, with retries, and only
                # then counts it gone.
                log.info("session %s: its sandbox did not answer at the start", key)
                continue
            await keeper.detach(adopted.sandbox)  # it answers for another session
            await asyncio.to_thread(owners.release, key, sandbox)
        return kept

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """End every session and remove every sandbox this executor started; with a backend
        that keeps sessions, their sandboxes are left running for the next process."""
        try:
            await asyncio.shield(self._close())
        finally:
            await self.backend.close()

    async def _close(self) -> None:
        keeper = self._keeper
        kept = await self.sessions.close_all(keep=keeper is not None)
        for sandbox in kept:
            assert keeper is not None
            await keeper.detach(sandbox)
        if kept:
            log.info("left %d session(s) running for the next start to attach to", len(kept))
        await self.pool.close()
        if isinstance(self.backend, DockerBackend):
            await self.backend.templates.close()
        # A removal that failed while the engine was away (a restart) leaves a container or
        # volume behind; one sweep by this instance's labels catches those.
        try:
            named = await self._named()
            removed = await self.backend.remove_leftovers(keep={s.id for s in kept} | named)
        except Exception as exc:  # the engine may be gone for good: nothing more to do
            log.warning("could not check for leftover sandboxes: %s", exc)
        else:
            if removed:
                log.warning("removed %d sandbox(es) whose removal had failed", removed)

    async def run_notebook(
        self,
        cells: str | Sequence[str],
        files: Mapping[str, bytes] | None = None,
        *,
        on_output: OutputCallback | None = None,
        stop: asyncio.Event | None = None,
        **overrides: Any,
    ) -> ExecutionResult:
        """Run cells in order in a sandbox no one used before (stopping at the first error),
        then destroy it. `overrides` replace fields of the limits for this run (`timeout_s=10`);
        container limits other than the executor's mean a sandbox started for this run."""
        limits = dataclasses.replace(self.limits, **overrides) if overrides else self.limits
        if limits.runtime != self.limits.runtime:
            await self.backend.check(limits.runtime)
        return await run_notebook(self.pool, _cells(cells), limits, files, on_output, stop)

    def owner_of(self, address: str) -> str | None:
        """Which session's sandbox has `address` on the sandbox network: the egress proxy
        asks, to know whose doors a request goes through."""
        return self.sessions.owner_of(address)

    def session(self, key: str) -> Session:
        """The session for `key` (a conversation); it starts on its first use."""
        return Session(self.sessions, key)


class Session:
    """A handle on one keyed session; cheap to create, holds no state of its own."""

    def __init__(self, manager: SessionManager, key: str) -> None:
        self._manager = manager
        self.key = key

    @property
    def active(self) -> bool:
        return self.key in self._manager.active

    async def run(
        self,
        code: str | Sequence[str],
        *,
        on_output: OutputCallback | None = None,
        on_queued: QueueCallback | None = None,
        stop: asyncio.Event | None = None,
        restore: Restore = Restore.VARIABLES,
        on_input: InputCallback | None = None,
        clock: RunClock | None = None,
        run_id: str = "",
        beside: asyncio.Event | None = None,
        language: str = "python",
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        **overrides: Any,
    ) -> ExecutionResult:
        """Run code in the session's kernel; variables and files carry over between runs.

        `stop`, when given, interrupts the run once set, even if it was set while the run
        still waited for its sandbox. `restore`: in a new session that starts from a saved
        workspace, whether its variables are loaded before the code (loading them runs
        code: Restore.FILES where a run of them would not be allowed); files come back
        either way. `on_input`: asks a person when the code calls `input()` or `getpass()`
        (the time limit waits meanwhile); without it, those raise as in a notebook run.
        `clock`: the run's time limit as the caller holds it (`RunClock`), to raise it while
        the code runs or when it is reached (a run sent to the background). `run_id`: the
        caller's name for the run, for `keep`. `beside`: when it is set while the code waits
        for another run of the session (one that went on in the background), the code runs
        in a second kernel of the same sandbox instead: the session's files, its own
        variables, and the result says so (`beside`); that kernel ends when neither runs.

        `language`: "python" (the default), "r", "javascript", "typescript" or "bash" (or
        a usual alias: "js", "ts", "sh", ...): each language has its own kernel in the
        session's sandbox and /mnt/data, started on its first run, with its own variables.
        `env`: environment variables for this run only; `cwd`: the working folder for this
        run only, inside /mnt/data (made if missing). InvalidInput when one is refused."""
        scope = run_scope(language, env, cwd)
        return await self._manager.run(
            self.key,
            _cells(code),
            on_output=on_output,
            on_queued=on_queued,
            stop=stop,
            restore=restore,
            on_input=on_input,
            clock=clock,
            run_id=run_id,
            beside=beside,
            scope=scope,
            **overrides,
        )

    async def pause(self) -> str | None:
        """Pause the session now: its whole sandbox (kernel memory, open files, threads) to
        a memory snapshot that holds no memory, which the next run (or `resume`) brings
        back; None when it was paused (or there was nothing to pause). Where no snapshot can
        be taken (runc, Kubernetes, network access, too much memory) its workspace is saved
        and the session ends, as at its idle timeout; the reason is returned."""
        return await self._manager.pause(self.key)

    async def resume(self) -> WorkspaceNews | None:
        """Bring the session back now, from its snapshot if it was paused to one (else it
        starts, with its saved workspace as a run would); what became of it, as the next
        run's note would have said (None: nothing to tell)."""
        async with self._manager.lock(self.key):
            await self._manager.open(self.key)
        return self._manager.news(self.key)

    def stop(self) -> bool:
        """Interrupt the running code (the kernel keeps its state); False if nothing runs."""
        return self._manager.stop(self.key)

    async def keep(self, run_id: str) -> None:
        """Let the run `run_id` (as given to `run`) outlive this process: where sessions
        survive a restart (`Executor.keeps_sessions`), a shutdown leaves it going, and the
        next process takes it over with `follow`. A run still waiting to start is kept from
        its start."""
        await self._manager.keep(self.key, run_id)

    async def follow(
        self,
        run_id: str,
        *,
        on_output: OutputCallback | None = None,
        stop: asyncio.Event | None = None,
        clock: RunClock | None = None,
    ) -> ExecutionResult:
        """Take over a run an earlier process kept (`keep`): its result, with all of its
        output (what it printed before is given to `on_output` first). A run that cannot be
        found again ends KILLED, saying why."""
        return await self._manager.follow(
            self.key, run_id, on_output=on_output, stop=stop, clock=clock
        )

    async def put_files(self, files: Mapping[str, bytes]) -> None:
        """Put files into /mnt/data; names may have folders (`in/sales.csv`)."""
        await self._manager.files.put_files(self.key, files)

    async def list_files(self) -> list[tuple[str, int]]:
        return await self._manager.files.list_files(self.key)

    async def restore(self, restore: Restore = Restore.VARIABLES) -> Restored:
        """Bring back the saved workspace now (at most once per session); what came back, as
        one line for the user. With Restore.FILES only its files come back."""
        return await self._manager.keeper.restore(self.key, restore)

    async def restorable(self, by_run: bool = True) -> tuple[str, ...]:
        """The saved variables a run (`by_run`) or `restore` would load now, to show a
        person who approves that; () when there are none."""
        return await self._manager.keeper.restorable(self.key, by_run)

    async def saved_files(self) -> list[tuple[str, int]] | None:
        """The files of the saved workspace the next session restores (None: none saved)."""
        return await self._manager.keeper.saved_files(self.key)

    async def saved_file_contents(self) -> dict[str, bytes] | None:
        """The files of the saved workspace, by path (None: none saved), read without
        starting a session or using up its restore."""
        saved = await self._manager.keeper.saved_workspace(self.key)
        return None if saved is None else dict(saved.files)

    async def files(
        self, path: str = "", recursive: bool = True, depth: int | None = None
    ) -> list[FileInfo]:
        """Files, folders and links under `path` in /mnt/data, with size, modified time,
        permission bits, owner and group, and a link's target ([] before the session
        started). `depth` levels down (1: the folder's own entries); None: every level, or
        one with `recursive=False`."""
        return await self._manager.files.files(self.key, path, recursive, depth)

    def read_file_stream(self, path: str, chunk_size: int = CHUNK_BYTES) -> AsyncIterator[bytes]:
        """A file's bytes in chunks of at most `chunk_size` (up to 4 MiB), for files of
        any size: `async for chunk in session.read_file_stream("out/big.parquet")`.
        InvalidInput when it cannot be read (missing, a link, a FIFO, a folder, no live
        session); SandboxError when the file changes while it is read."""
        return self._manager.files.read_stream(self.key, path, chunk_size)

    async def write_file_stream(
        self, path: str, chunks: Iterable[bytes] | AsyncIterable[bytes]
    ) -> int:
        """Write a file from an (async) iterable of bytes, replacing a file there; missing
        folders are made, and the session starts if needed. The file appears whole once the
        last chunk is in; a refusal (too large, a full disk, a link or folder in the way)
        leaves nothing behind. The bytes written."""
        return await self._manager.files.write_stream(self.key, path, chunks)

    async def info(self, path: str) -> FileInfo | None:
        return await self._manager.files.info(self.key, path)

    async def make_dir(self, path: str) -> None:
        await self._manager.files.change_files(self.key, "make_dir", path)

    async def remove(self, path: str) -> None:
        """Remove a file, or a folder with everything in it."""
        await self._manager.files.change_files(self.key, "remove", path)

    async def rename(self, path: str, to: str) -> None:
        """Move a file or folder within /mnt/data; InvalidInput when `to` exists."""
        await self._manager.files.change_files(self.key, "rename", path, to)

    async def set_env(self, values: Mapping[str, str]) -> None:
        """Set environment variables in the kernel, for names in
        `SandboxLimits.env_allowed` (`CELLMATE_SANDBOX_ENV_ALLOWED`); InvalidInput otherwise."""
        await self._manager.files.set_env(self.key, values)

    async def get_file(self, path: str) -> bytes | None:
        return await self._manager.files.get_file(self.key, path)

    async def export_notebook(self) -> dict[str, Any] | None:
        """All cells run so far, with their outputs, as nbformat 4 JSON."""
        notebook = await self._manager.files.export(self.key)
        return notebook if isinstance(notebook, dict) else None

    async def preview(self, paths: Sequence[str]) -> dict[str, str]:
        """Schema previews of tabular files in /mnt/data (columns, types, first rows), read
        inside the sandbox, for the model to see instead of the raw contents."""
        return await self._manager.files.preview(self.key, paths)

    async def close(self) -> None:
        await self._manager.close(self.key)


def _cells(code: str | Sequence[str]) -> list[str]:
    return [code] if isinstance(code, str) else list(code)
