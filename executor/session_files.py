"""What a caller may do with a live session besides running code: its files in /mnt/data,
its environment variables, its notebook, and previews of its tabular files."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
    Sequence,
)
from typing import Any, cast

from executor import wire
from executor.archive import build_input_tar
from executor.errors import FreezeFailed, InvalidInput, SandboxError
from executor.limits import SandboxLimits, is_bot_variable
from executor.models import FileInfo, OutputFile, SkippedFile
from executor.notebook import MB, output_caps, skipped_notes
from executor.runner_client import REQUEST_TIMEOUT_S, Answer, RunnerClient
from executor.session_live import Live, LiveSessions
from executor.session_paths import normal, safe_relative
from executor.session_streams import read_stream, write_stream

MAX_CHANGED_PATHS = 20_000
"""As many changed paths as the runner lists; more can only come from a forged event."""


class SessionFiles:
    def __init__(self, sessions: LiveSessions, limits: SandboxLimits) -> None:
        self.sessions = sessions
        self.limits = limits

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
        async with self.sessions.lock(key):
            live = await self.sessions.open(key)
            await live.lease.sandbox.put_files(tar)
            live.last_used = time.monotonic()

    async def list_files(self, key: str) -> list[tuple[str, int]]:
        async with self.sessions.lock(key):
            live = self.sessions.live(key)
            if live is None:
                return []
            found = await live.lease.sandbox.get_files(output_caps(self.limits))
            return [(f.path, f.size) for f in found.files]

    async def get_file(self, key: str, path: str) -> bytes | None:
        if not safe_relative(path):
            raise InvalidInput(f"file path {path!r} must be relative to /mnt/data, without '..'")
        async with self.sessions.lock(key):
            live = self.sessions.live(key)
            if live is None:
                return None
            found = await live.lease.sandbox.get_files(
                dataclasses.replace(output_caps(self.limits), max_files=1), wanted={normal(path)}
            )
            return found.files[0].content if found.files else None

    async def files(
        self, key: str, path: str = "", recursive: bool = True, depth: int | None = None
    ) -> list[FileInfo]:
        """Entries under `path` in the session's /mnt/data ([] without a live session),
        `depth` levels down (1: the folder's own entries; None: as `recursive` says)."""
        if depth is not None and not 1 <= depth <= 10_000:
            raise InvalidInput(f"depth {depth!r} must be at least 1 (None: every level)")
        reply = await self._files_op(
            key, "list", path, start=False, recursive=recursive, depth=depth or 0
        )
        found = (reply.entries or ()) if reply else ()
        return [entry for item in found if (entry := _file_info(item)) is not None]

    def read_stream(self, key: str, path: str, chunk_size: int) -> AsyncIterator[bytes]:
        """A file in the session's /mnt/data, chunk by chunk (see executor.session_streams)."""
        return read_stream(self.sessions, key, path, chunk_size)

    async def write_stream(
        self, key: str, path: str, chunks: Iterable[bytes] | AsyncIterable[bytes]
    ) -> int:
        """Write a file into the session's /mnt/data from chunks; the bytes written."""
        return await write_stream(self.sessions, self.limits, key, path, chunks)

    async def info(self, key: str, path: str) -> FileInfo | None:
        """One entry, None when it (or the session) does not exist."""
        try:
            reply = await self._files_op(key, "info", path, start=False)
        except InvalidInput:
            return None
        return _file_info(reply.entry) if reply else None

    async def change_files(self, key: str, action: str, path: str, to: str = "") -> None:
        """make_dir, remove or rename (to `to`) in the session's /mnt/data."""
        if action not in ("make_dir", "remove", "rename"):
            raise InvalidInput(f"unknown file action {action!r}")
        await self._files_op(key, cast(wire.FsAction, action), path, start=True, to=to)

    async def _files_op(
        self,
        key: str,
        action: wire.FsAction,
        path: str,
        start: bool,
        to: str = "",
        recursive: bool = True,
        depth: int = 0,
    ) -> wire.FsDone | None:
        for given in (path, to):
            if given and not safe_relative(given):
                raise InvalidInput(f"path {given!r} must be relative to /mnt/data, without '..'")
        async with self.sessions.lock(key):
            live = self.sessions.live(key)
            if live is None and not start:
                return None
            if live is None:
                live = await self.sessions.open(key)
            try:
                reply = await RunnerClient(live.lease.sandbox).fs(
                    action, path, to, recursive, depth
                )
            except TimeoutError:
                raise SandboxError(f"the sandbox did not {action} in time") from None
            if reply is None:
                raise SandboxError(f"the sandbox stopped before it could {action}")
            live.last_used = time.monotonic()
        if reply.error:
            raise InvalidInput(f"could not {action.replace('_', ' ')} {path!r}: {reply.error}")
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
        async with self.sessions.lock(key):
            live = await self.sessions.open(key)
            reply = await RunnerClient(live.lease.sandbox).env(values)
            if reply is None or not reply.ok:
                raise SandboxError("the sandbox could not set the environment variables")

    async def export(self, key: str) -> Any:
        """The session's notebook (nbformat 4 JSON), or None without a live session."""
        reply = await self._ask(key, RunnerClient.export, "export the session")
        return None if reply is None else reply.content

    async def preview(self, key: str, paths: Sequence[str]) -> dict[str, str]:
        """Short schema previews (columns, types, first rows) of tabular files in the session."""
        for path in paths:
            if not safe_relative(path):
                raise InvalidInput(
                    f"file path {path!r} must be relative to /mnt/data, without '..'"
                )
        reply = await self._ask(key, lambda client: client.preview(paths), "preview files")
        found = {} if reply is None else reply.previews
        return {k: v[:3000] for k, v in found.items() if k in paths}

    async def _ask(
        self,
        key: str,
        ask: Callable[[RunnerClient], Awaitable[Answer | None]],
        doing: str,
    ) -> Answer | None:
        """Send a request to the session's runner and wait for its reply (None: no session)."""
        async with self.sessions.lock(key):
            live = self.sessions.live(key)
            if live is None:
                return None
            try:
                reply = await ask(RunnerClient(live.lease.sandbox))
            except TimeoutError:
                raise SandboxError(
                    f"the sandbox did not {doing} within {REQUEST_TIMEOUT_S:g} s"
                ) from None
            if reply is None:
                raise SandboxError(f"the sandbox stopped before it could {doing}")
            return reply


async def changed_files(
    live: Live, changed: list[str], limits: SandboxLimits
) -> tuple[list[OutputFile], list[SkippedFile]]:
    """The files the runner says changed, read from one archive of /mnt/data: the list
    only selects what to read, so a forged or stale list cannot reach outside it."""
    wanted: set[str] = set()
    skipped: list[SkippedFile] = []
    for path in changed[:MAX_CHANGED_PATHS]:
        if safe_relative(path):
            wanted.add(normal(path))
        elif len(skipped) < limits.max_output_files:
            skipped.append(SkippedFile(path=path[:200], reason="path leaves /mnt/data"))
    if not wanted:
        return [], skipped
    try:
        found = await live.lease.sandbox.get_files(output_caps(limits), wanted=wanted)
    except FreezeFailed as exc:  # the run's output still comes back, its files do not
        return [], [*skipped, SkippedFile(path="(files of this run)", reason=str(exc))]
    return found.files, skipped + skipped_notes(found, limits)


def _file_info(item: wire.Entry | None) -> FileInfo | None:
    if item is None or not safe_relative(item.path):
        return None
    return FileInfo(
        path=item.path,
        type=item.type,
        size=item.size,
        modified=item.modified,
        mode=item.mode,
        owner=item.owner,
        group=item.group,
        symlink_target=item.target if item.type == "link" else None,
    )
