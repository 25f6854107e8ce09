"""The host's side of the runner protocol (executor/wire/), over any started sandbox.

`RunnerClient` sends typed requests and reads typed events; everything that asks a runner
something goes through it. A sandbox's `send`/`receive` carry the JSON objects; this
client encodes and decodes them with the protocol's declarations, and skips events it
does not know. A request that needs an answer gets a fresh id and waits for the answer
that repeats it: None when the sandbox's output ended first, TimeoutError past the
client's (or the call's) deadline.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TypeVar

from executor import wire
from executor.errors import SandboxError, SandboxTaken
from executor.protocol import Recovered, Sandbox

REQUEST_TIMEOUT_S = 60.0
RUN_EVENTS = wire.Started | wire.Output | wire.InputRequest | wire.Done | wire.Following
Answer = TypeVar("Answer", bound=wire.Event)


def request_id() -> str:
    return uuid.uuid4().hex[:12]


class RunnerClient:
    def __init__(self, sandbox: Sandbox, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self.sandbox = sandbox
        self.timeout_s = timeout_s

    async def send(self, request: wire.Request) -> None:
        await self.sandbox.send(wire.encode(request))

    async def event(self) -> wire.Event | None:
        """The runner's next declared event, or None once its output has ended. A `resumed`
        this side did not ask for is SandboxTaken: another replica attached to the sandbox
        and took its session over (its runner answers that host from now on)."""
        event = await self._event()
        if isinstance(event, wire.Resumed):
            raise SandboxTaken("another of the bot's replicas took this session over")
        return event

    async def _event(self) -> wire.Event | None:
        while (found := await self.sandbox.receive()) is not None:
            event = wire.decode_event(found)
            if event is not None:
                return event
        return None

    async def ready(self) -> wire.Ready | None:
        """The runner's `ready` (None: the sandbox's output ended first)."""
        while (event := await self.event()) is not None:
            if isinstance(event, wire.Ready):
                return event
        return None

    async def warm(self) -> bool:
        """After ready: whether the runner said its data stack is loaded before it stopped."""
        while (event := await self.event()) is not None:
            if isinstance(event, wire.Warm):
                return True
        return False

    async def run(
        self,
        cells: Sequence[str],
        *,
        output_limit: int,
        rich_limit: int,
        rich_count_limit: int,
        background: bool = False,
        notebook: bool = False,
        stdin: bool = False,
        run_id: str = "",
        keep: bool = False,
        kernel: wire.Kernel = "",
        language: wire.Language = "python",
        env: Mapping[str, str] | None = None,
        cwd: str = "",
    ) -> str:
        """Start a run; its id, for `run_events`. The id is long enough that it cannot be
        guessed (the runner keeps it where the user's code cannot read it)."""
        run_id = run_id or uuid.uuid4().hex
        await self.send(
            wire.Run(
                id=run_id,
                cells=tuple(cells),
                output_limit=output_limit,
                rich_limit=rich_limit,
                rich_count_limit=rich_count_limit,
                background=background,
                notebook=notebook,
                stdin=stdin,
                keep=keep,
                kernel=kernel,
                language=language,
                env=dict(env or {}),
                cwd=cwd,
            )
        )
        return run_id

    async def run_events(self, run_id: str) -> AsyncIterator[RUN_EVENTS]:
        """The run's `started`, outputs and input requests, then its `done`; ends early when
        the sandbox's output does, or when a followed run is not found."""
        while (event := await self.event()) is not None:
            if isinstance(event, RUN_EVENTS) and event.id == run_id:
                yield event
                if isinstance(event, wire.Done):
                    return
                if isinstance(event, wire.Following) and not event.found:
                    return

    async def keep(self, run_id: str) -> None:
        await self.send(wire.Keep(id=run_id))

    async def follow(self, run_id: str) -> None:
        """Take over a kept run: its events come from `run_events`, from its start."""
        await self.send(wire.Follow(id=run_id))

    async def until_done(self) -> bool:
        """Wait for the end of whatever run is going on (False: the output ended first)."""
        while (event := await self.event()) is not None:
            if isinstance(event, wire.Done):
                return True
        return False

    async def interrupt(self, kernel: wire.Kernel = "", language: wire.Language = "python") -> None:
        await self.send(wire.Interrupt(kernel=kernel, language=language))

    async def claim(self, session: str) -> None:
        await self.send(wire.Claim(session=session))

    async def resume(self, nonce: str = "") -> wire.Resumed | None:
        """Ask who holds the sandbox, as a host that attached again (the stream starts a new
        numbering for it): the answer, once the runner's earlier chatter (`warm`) is past."""
        nonce = nonce or uuid.uuid4().hex
        await self.send(wire.Resume(nonce=nonce))
        async with asyncio.timeout(self.timeout_s):
            while (event := await self._event()) is not None:
                if isinstance(event, wire.Resumed) and event.nonce == nonce:
                    return event
                if isinstance(event, wire.Resumed):
                    raise SandboxTaken("another of the bot's replicas took this session over")
        return None

    async def rekey(self, reseed: bool = False, key: bytes | None = None) -> wire.Rekeyed | None:
        """Give the runner a fresh key (a sandbox restored from a snapshot, after `resume`;
        random unless `key` is given): its answer, the first line under the new key; None
        when its output ended first."""
        nonce = uuid.uuid4().hex
        key = key or os.urandom(wire.KEY_BYTES)
        await self.send(wire.Rekey(nonce=nonce, key=key.hex(), reseed=reseed))
        async with asyncio.timeout(self.timeout_s):
            while (event := await self.event()) is not None:
                if isinstance(event, wire.Rekeyed) and event.nonce == nonce:
                    return event
        return None

    async def shutdown(self) -> None:
        await self.send(wire.Shutdown())

    async def export(self) -> wire.Exported | None:
        return await self._ask(wire.Export(id=request_id()), wire.Exported)

    async def preview(self, paths: Sequence[str]) -> wire.Previewed | None:
        return await self._ask(wire.Preview(id=request_id(), paths=tuple(paths)), wire.Previewed)

    async def snapshot(self, max_bytes: int, timeout_s: float = 0) -> wire.SnapshotTaken | None:
        request = wire.Snapshot(id=request_id(), max_bytes=max_bytes)
        return await self._ask(request, wire.SnapshotTaken, timeout_s)

    async def restore(
        self, variables: str, cells: Sequence[str] = (), r_variables: str = ""
    ) -> wire.Restored | None:
        request = wire.Restore(
            id=request_id(), variables=variables, cells=tuple(cells), r_variables=r_variables
        )
        return await self._ask(request, wire.Restored)

    async def install(self, packages: Sequence[str], timeout_s: float) -> wire.Installed | None:
        request = wire.Install(id=request_id(), packages=tuple(packages))
        return await self._ask(request, wire.Installed, timeout_s)

    async def fs(
        self,
        action: wire.FsAction,
        path: str,
        to: str = "",
        recursive: bool = True,
        depth: int = 0,
    ) -> wire.FsDone | None:
        request = wire.Fs(
            id=request_id(), action=action, path=path, to=to, recursive=recursive, depth=depth
        )
        return await self._ask(request, wire.FsDone)

    async def read_chunk(self, path: str, offset: int, size: int) -> wire.Chunk | None:
        request = wire.ReadChunk(id=request_id(), path=path, offset=offset, size=size)
        return await self._ask(request, wire.Chunk)

    async def write_chunk(
        self,
        upload: str,
        path: str,
        offset: int,
        data: bytes,
        last: bool = False,
        abort: bool = False,
    ) -> wire.Written | None:
        request = wire.WriteChunk(
            id=request_id(),
            upload=upload,
            path=path,
            offset=offset,
            data=data,
            last=last,
            abort=abort,
        )
        return await self._ask(request, wire.Written)

    async def env(self, values: Mapping[str, str]) -> wire.EnvSet | None:
        return await self._ask(wire.Env(id=request_id(), values=dict(values)), wire.EnvSet)

    async def _ask(
        self,
        request: wire.Export
        | wire.Preview
        | wire.Snapshot
        | wire.Restore
        | wire.Install
        | wire.Fs
        | wire.Env
        | wire.ReadChunk
        | wire.WriteChunk,
        answer: type[Answer],
        timeout_s: float = 0,
    ) -> Answer | None:
        await self.send(request)
        async with asyncio.timeout(timeout_s or self.timeout_s):
            while (event := await self.event()) is not None:
                if isinstance(event, answer) and getattr(event, "id", None) == request.id:
                    return event
        return None


async def claimed_session(sandbox: Sandbox, timeout_s: float) -> Recovered | None:
    """Ask the runner of a sandbox this process did not start whose session it holds; a run
    that a lost process started is interrupted and waited for, unless it was kept (it went
    on in the background: the new process follows it). None: no answer under this side's
    key, or no session."""
    client = RunnerClient(sandbox, timeout_s)
    try:
        async with asyncio.timeout(timeout_s):
            answer = await client.resume()
            if answer is None or not answer.session:
                return None
            if answer.busy and not answer.kept:
                await client.interrupt()
                if not await client.until_done():
                    return None
    except (TimeoutError, SandboxError, SandboxTaken):
        return None
    return Recovered(sandbox=sandbox, session=answer.session, kept=answer.kept)
