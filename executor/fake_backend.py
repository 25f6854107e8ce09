"""A sandbox backend without Docker, for fast tests of everything above the executor.

`FakeBackend` plays the runner's side of the whole runner protocol (executor/wire/: it
decodes each request and answers with the declared events) from a script, the way httpx's
MockTransport plays a server: each cell's code is looked up in the script, which says what
the run prints, displays, raises, writes to /mnt/data, or whether it hangs, ignores
interrupts, or kills its kernel. No code is ever executed. File operations, environment
variables, previews, snapshots, restores, claims and resumes are answered from the fake's
own state. The pool, sessions, time limits, stop, output caps and file caps above it are the
real ones (tests/contract runs the same cases on the fake, Docker and Kubernetes):

    backend = FakeBackend({"print(1)": FakeRun(outputs=[stdout("1\\n")])})
    async with Executor("unused", backend=backend, pool=PoolSettings(size=0)) as executor:
        result = await executor.session("k").run("print(1)")

Code the script does not know gets `FakeBackend.default` (by default: an empty, ok run).
It is one module past 400 lines because it is one concept, the runner's stand-in: the script,
the fake sandbox that answers the protocol and the backend that starts it are read together
(its /mnt/data is fake_files.py).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import re
import tarfile
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from executor import wire
from executor.archive import ExtractedFiles, OutputCaps, read_output_tar
from executor.errors import ChannelDamaged, EngineUnavailable, SnapshotFailed
from executor.fake_files import FakeTree
from executor.limits import SandboxLimits
from executor.protocol import ExitState, PausedSandbox, Recovered, Sandbox
from executor.runner_client import claimed_session


@dataclass(frozen=True, slots=True)
class FakeRun:
    """What one cell does when the fake runs it."""

    outputs: Sequence[Mapping[str, Any]] = ()
    """nbformat outputs, streamed in order (see `stdout`, `stderr`, `result`, `image`)."""
    error: tuple[str, str] | None = None
    """(ename, evalue): the cell raises after its outputs; later cells do not run."""
    files: Mapping[str, bytes] = field(default_factory=dict)
    """Files the cell writes under /mnt/data (relative paths)."""
    removed: Sequence[str] = ()
    hang: bool = False
    """Runs until interrupted, then raises KeyboardInterrupt, as a sleeping cell does."""
    ignore_interrupt: bool = False
    """With hang: keeps running after the interrupt, so the host has to kill the sandbox."""
    kernel_dies: int | None = None
    """The kernel exits with this code (e.g. -9) after the outputs."""
    out_of_memory: bool = False
    """With kernel_dies: the kernel was killed for memory."""
    delay_s: float = 0.0
    """Time between outputs, for tests of streaming and progress."""
    assigns: Mapping[str, str] = field(default_factory=dict)
    """Variables the cell sets in the kernel (name -> printed value)."""
    unsaveable: Sequence[str] = ()
    """Variables the cell sets that a workspace snapshot cannot save (open connections)."""
    shows: str | None = None
    """Prints this variable's value, or raises NameError when the kernel has none."""
    installs: Sequence[str] = ()
    """Packages the cell installs with pip, as `name==version` (what a snapshot records)."""
    asks: Sequence[tuple[str, bool]] = ()
    """Prompts the cell asks with `input()` (False) or `getpass()` (True), in order, after
    its outputs; then it prints the answers on one line, separated by spaces (as
    `print(a, b)` would), a `getpass()` one masked as the runner masks it. Without an answer
    the cell raises EOFError, and in a run that allows no input, StdinNotImplementedError."""
    breaks_channel: bool = False
    """Writes into the runner's channel and breaks its next message (an output it sends
    after this cell's own): the host's stream finds a message missing."""


BROKEN: dict[str, Any] = {}
"""In a fake sandbox's event queue: the message a real stream finds missing."""
RESUME_ANSWER_S = 5.0
NOTICE_LIMIT = 20
"""As the runner: at most this many `log` events per sandbox."""
Script = Mapping[str, FakeRun] | Callable[[str], FakeRun | None]


def stdout(text: str) -> dict[str, Any]:
    return {"output_type": "stream", "name": "stdout", "text": text}


def stderr(text: str) -> dict[str, Any]:
    return {"output_type": "stream", "name": "stderr", "text": text}


def result(text: str, count: int | None = 1) -> dict[str, Any]:
    return {
        "output_type": "execute_result",
        "execution_count": count,
        "data": {"text/plain": text},
        "metadata": {},
    }


def image(png: bytes) -> dict[str, Any]:
    return {
        "output_type": "display_data",
        "data": {"image/png": base64.b64encode(png).decode(), "text/plain": "<Figure>"},
        "metadata": {},
    }


class FakeSandbox:
    def __init__(self, backend: FakeBackend, limits: SandboxLimits) -> None:
        self._backend = backend
        self._limits = limits
        self._id = f"fake-{uuid.uuid4().hex[:12]}"
        self._events: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._interrupted = asyncio.Event()
        self._beside_interrupted = asyncio.Event()
        self._beside: asyncio.Task[None] | None = None
        self.beside_variables: dict[str, str] = {}
        """The second kernel's (wire `Run.kernel` "beside"): it ends when neither runs."""
        self.beside_runs = 0
        self._reply: asyncio.Future[wire.InputReply | None] | None = None
        """The answer the cell waits for in `input()`."""
        self.secrets: set[str] = set()
        """Answers given to `getpass()` (the runner keeps them to mask them)."""
        self._running: asyncio.Task[None] | None = None
        self._cells: list[tuple[str, list[Mapping[str, Any]]]] = []
        self.files: dict[str, bytes] = {}
        self._ended = False
        self._frozen = False
        self._exit: ExitState | None = None
        self.destroyed = False
        self.session = ""
        self.variables: dict[str, str] = {}
        self.r_variables: dict[str, str] = {}
        """R's, apart as in R's kernel: saved and restored beside Python's."""
        self.unsaveable: set[str] = set()
        self.env: dict[str, str] = {}
        """Environment variables set in the fake kernel."""
        self.packages: list[str] = []
        """What was installed into the packages folder, as pins."""
        self.notices = 0
        self.tree = FakeTree(
            self.files,
            owner="sandbox" if limits.uid == 61000 else str(limits.uid),
            max_bytes=limits.data_mb * 1024 * 1024,
        )
        self.address: str | None = None
        """None, or what a test says the sandbox's network address is."""
        self.keys = 1
        """How many keys it was given (a resumed snapshot gets a fresh one)."""
        self.heard = True
        """False while no host is attached (detached): what it says goes nowhere."""
        self._record: tuple[str, float, list[wire.Event]] | None = None
        """The run in progress, or a kept one: its id, start and events (as the runner's)."""
        self._kept = False
        self._asking: wire.InputRequest | None = None
        self.instance = backend.instance
        """The label of the replica that started it."""
        self.holder: FakeBackend | None = backend
        """The backend (a replica) attached to it now; None while detached."""
        self.attachments: list[FakeAttachment] = []
        """Other hosts attached to it (replicas that took it over): each hears every event."""

    @property
    def id(self) -> str:
        return self._id

    @property
    def alive(self) -> bool:
        return not self._ended

    async def put_files(self, tar: bytes) -> None:
        with tarfile.open(fileobj=io.BytesIO(tar), mode="r") as archive:
            for member in archive:
                extracted = archive.extractfile(member) if member.isfile() else None
                if extracted is not None:
                    self.files[member.name.lstrip("./")] = extracted.read()

    async def send(self, request: Mapping[str, Any]) -> None:
        try:
            decoded = wire.decode_request(wire.dumps(request))
        except wire.Malformed:
            await self._notice("malformed request ignored")
            return
        await self._answer(decoded)

    async def _write(self, line: bytes) -> None:
        """A raw line on the runner's input: never sealed here, so it is ignored."""
        await self._notice("unsealed request ignored")

    async def _answer(self, request: wire.Request) -> None:
        if isinstance(request, wire.Run):
            self._backend.asked.append(request)
        if isinstance(request, wire.Run) and request.kernel == "beside":
            if self._beside is not None and not self._beside.done():
                await self._notice("a run is already in progress beside")
                return
            self._beside_interrupted.clear()
            self.beside_runs += 1
            self._beside = asyncio.create_task(self._run_beside(request))
        elif isinstance(request, wire.Run):
            if self._running is not None and not self._running.done():
                await self._notice("a run is already in progress")
                return
            self._interrupted.clear()
            self._record, self._kept = (request.id, time.monotonic(), []), request.keep
            self._running = asyncio.create_task(self._run(request))
        elif isinstance(request, wire.Interrupt) and request.kernel == "beside":
            self._beside_interrupted.set()
        elif isinstance(request, wire.Interrupt):
            self._interrupted.set()
            if self._reply is not None and not self._reply.done():
                self._reply.set_result(None)
        elif isinstance(request, wire.InputReply):
            if self._reply is not None and not self._reply.done():
                self._reply.set_result(request)
        elif isinstance(request, wire.Export):
            await self._emit(wire.Exported(id=request.id, content=self._notebook(self._cells)))
        elif isinstance(request, wire.Preview):
            previews = {
                path: f"{path}: {len(self.files.get(path, b''))} bytes" for path in request.paths
            }
            await self._emit(wire.Previewed(id=request.id, previews=previews))
        elif isinstance(request, wire.Snapshot):
            await self._emit(await self._snapshot(request))
        elif isinstance(request, wire.Restore):
            await self._emit(self._restore(request))
        elif isinstance(request, wire.Install):
            await self._emit(self._install(request))
        elif isinstance(request, wire.Fs):
            await self._emit(self._fs(request))
        elif isinstance(request, wire.ReadChunk):
            await self._emit(self.tree.read(request))
        elif isinstance(request, wire.WriteChunk):
            await self._emit(self.tree.write(request))
        elif isinstance(request, wire.Env):
            self.env.update(request.values)
            await self._emit(wire.EnvSet(id=request.id, ok=True))
        elif isinstance(request, wire.Claim):
            self.session = request.session
        elif isinstance(request, wire.Keep):
            self._kept = self._kept or (self._record is not None and self._record[0] == request.id)
        elif isinstance(request, wire.Follow):
            await self._follow(request)
        elif isinstance(request, wire.Resume):
            busy = self._running is not None and not self._running.done()
            kept = self._record[0] if self._record is not None and self._kept else ""
            await self._emit(
                wire.Resumed(nonce=request.nonce, session=self.session, busy=busy, kept=kept)
            )
        elif isinstance(request, wire.Rekey):
            self.keys += 1
            await self._emit(wire.Rekeyed(nonce=request.nonce, reseeded=request.reseed))
        elif isinstance(request, wire.Shutdown):
            self._end()

    async def _follow(self, request: wire.Follow) -> None:
        """As the runner: a kept run's events again, then the rest as they come."""
        record = self._record
        if record is None or not self._kept or record[0] != request.id:
            await self._emit(wire.Following(id=request.id))
            return
        run_id, started, events = record
        elapsed = round((time.monotonic() - started) * 1000)
        await self._emit(wire.Following(id=run_id, found=True, elapsed_ms=elapsed))
        self._record = None
        for event in list(events):
            await self._emit(event)
        ended = any(isinstance(event, wire.Done) for event in events)
        if self._asking is not None and not ended:
            await self._emit(self._asking)
        self._record = record

    async def _snapshot(self, request: wire.Snapshot) -> wire.SnapshotTaken:
        await asyncio.sleep(self._backend.snapshot_s.get(self.session, 0.0))
        saved = {k: v for k, v in self.variables.items() if k not in self.unsaveable}
        return wire.SnapshotTaken(
            id=request.id,
            variables=base64.b64encode(json.dumps(saved).encode()).decode(),
            saved=tuple(sorted(saved)),
            skipped={name: "an open connection" for name in sorted(self.unsaveable)},
            cells=tuple(code for code, _ in self._cells),
            packages=tuple(self.packages),
            r_variables=(
                base64.b64encode(json.dumps(self.r_variables).encode()).decode()
                if self.r_variables
                else ""
            ),
            r_saved=tuple(sorted(self.r_variables)),
        )

    async def _ask(
        self,
        request: wire.Run,
        index: int,
        asks: Sequence[tuple[str, bool]],
        kept: list[Mapping[str, Any]],
    ) -> tuple[str, str] | None:
        """The cell's `input()` and `getpass()` calls: the error they end it with, if any."""
        shown: list[str] = []
        for prompt, password in asks:
            if not request.stdin:
                return (
                    "StdinNotImplementedError",
                    "raw_input was called, but this frontend does not support input requests.",
                )
            self._reply = asyncio.get_running_loop().create_future()
            self._asking = wire.InputRequest(id=request.id, prompt=prompt, password=password)
            await self._emit(self._asking)
            reply = await self._reply
            self._asking = None
            if reply is None:
                return ("KeyboardInterrupt", "Interrupted by user")
            if not reply.given:
                return ("EOFError", "EOF when reading a line")
            if password:
                self.secrets.add(reply.value)
            shown.append(wire.MASKED if password else reply.value)
        printed = stdout(" ".join(shown) + "\n")
        kept.append(printed)
        await self._emit(wire.Output(id=request.id, cell=index, output=printed))
        return None

    def _installed(self, pins: Sequence[str]) -> None:
        self.packages.extend(pin for pin in pins if pin not in self.packages)

    def _install(self, request: wire.Install) -> wire.Installed:
        """As pip: every pin the backend's index holds (all, without one), or an error."""
        self._backend.installs.append(list(request.packages))
        if self._limits.egress != "allowlist":
            return wire.Installed(id=request.id, error="ERROR: the index cannot be reached")
        index = self._backend.index
        missing = [pin for pin in request.packages if index is not None and pin not in index]
        if missing:
            error = f"ERROR: No matching distribution found for {missing[0]}"
            return wire.Installed(id=request.id, error=error)
        self._installed(request.packages)
        return wire.Installed(id=request.id, ok=True)

    def _restore(self, request: wire.Restore) -> wire.Restored:
        try:
            restored = json.loads(base64.b64decode(request.variables) or b"{}")
        except ValueError as exc:
            return wire.Restored(id=request.id, error=f"{type(exc).__name__}: {exc}"[:300])
        try:
            r_restored = json.loads(base64.b64decode(request.r_variables) or b"{}")
        except ValueError as exc:
            return wire.Restored(id=request.id, error=f"{type(exc).__name__}: {exc}"[:300])
        self._backend.restores.append(sorted(restored))
        self.variables.update(restored)
        self.r_variables.update(r_restored)
        self._cells.extend((code, []) for code in request.cells)
        return wire.Restored(
            id=request.id, restored=tuple(sorted(restored)), r_restored=tuple(sorted(r_restored))
        )

    def _fs(self, request: wire.Fs) -> wire.FsDone:
        """The runner's file operations, on the fake's files and folders."""
        try:
            return self.tree.apply(request)
        except (OSError, ValueError) as exc:
            return wire.FsDone(id=request.id, error=f"{type(exc).__name__}: {exc}"[:300])

    async def receive(self) -> dict[str, Any] | None:
        return await _received(self._events, self._ended)

    def _put(self, item: dict[str, Any] | None) -> None:
        """What the runner writes, to every host attached (as each attach stream gets it)."""
        if self.heard or item is None:
            self._events.put_nowait(item)
        for attachment in self.attachments:
            if attachment.heard or item is None:
                attachment.events.put_nowait(item)

    async def get_files(
        self,
        caps: OutputCaps,
        unchanged: Mapping[str, bytes] | None = None,
        wanted: Collection[str] | None = None,
    ) -> ExtractedFiles:
        # The real archive reader, so caps and refusals are the ones Docker sandboxes get.
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            for path, content in sorted(self.files.items()):
                info = tarfile.TarInfo(f"data/{path}")
                info.size = len(content)
                archive.addfile(info, io.BytesIO(content))
        buffer.seek(0)
        return read_output_tar(buffer, caps, unchanged, wanted)

    async def exit_state(self) -> ExitState:
        if self._exit is not None:
            return self._exit
        return ExitState(running=not self._ended, exit_code=None, oom_killed=False)

    async def kill(self) -> None:
        self._frozen = True
        if self._running is not None:
            self._running.cancel()

    async def destroy(self) -> None:
        if self.destroyed:
            return
        await self.kill()
        self._end()
        self.destroyed = True
        self._backend.live.discard(self)
        self._backend.detached.discard(self)

    async def _run_beside(self, request: wire.Run) -> None:
        await self._run(request, beside=True)
        if self._running is None or self._running.done():
            self.beside_variables.clear()  # as the runner: the second kernel ends

    async def _run(self, request: wire.Run, beside: bool = False) -> None:
        variables = self.beside_variables if beside else self.variables
        if request.language == "r":
            variables = self.r_variables
        interrupted = self._beside_interrupted if beside else self._interrupted
        run_id = request.id
        await self._emit(wire.Started(id=run_id))
        cells = list(request.cells)
        status, exit_code, oom = "ok", None, False
        before = dict(self.files)
        for index, code in enumerate(cells):
            self._backend.runs.append(code)
            step = self._backend.lookup(code)
            kept: list[Mapping[str, Any]] = []
            if not beside:
                self._cells.append((code, kept))
            for output in step.outputs:
                if step.delay_s:
                    await asyncio.sleep(step.delay_s)
                kept.append(output)
                await self._emit(wire.Output(id=run_id, cell=index, output=output))
            for path in step.removed:
                self.files.pop(path, None)
            self.files.update(step.files)
            variables.update(step.assigns)
            self._installed(step.installs)
            self.unsaveable.update(step.unsaveable)
            variables.update({name: "<connection>" for name in step.unsaveable})
            error = step.error
            if step.shows is not None:
                if step.shows in variables:
                    shown = stdout(f"{variables[step.shows]}\n")
                    kept.append(shown)
                    await self._emit(wire.Output(id=run_id, cell=index, output=shown))
                else:
                    error = ("NameError", f"name '{step.shows}' is not defined")
            if error is None and step.asks:
                error = await self._ask(request, index, step.asks, kept)
            if step.breaks_channel and not self._frozen:
                self._put(BROKEN)
            if step.hang:
                await interrupted.wait()
                if step.ignore_interrupt:
                    await asyncio.Event().wait()  # until the host kills the sandbox
                error = ("KeyboardInterrupt", "")
            if step.kernel_dies is not None:
                status, exit_code, oom = "died", step.kernel_dies, step.out_of_memory
                self._exit = ExitState(running=True, exit_code=None, oom_killed=step.out_of_memory)
                break
            if error is not None:
                ename, evalue = error
                failure = {
                    "output_type": "error",
                    "ename": ename,
                    "evalue": evalue,
                    "traceback": [f"{ename}: {evalue}"],
                }
                kept.append(failure)
                await self._emit(wire.Output(id=run_id, cell=index, output=failure))
                status = "error"
                break
        changed = sorted(p for p, c in self.files.items() if before.get(p) != c)
        notebook = self._notebook(self._cells[-len(cells) :]) if request.notebook else None
        await self._emit(
            wire.Done(
                id=run_id,
                status=status,
                changed=tuple(changed),
                exit_code=exit_code,
                oom=oom,
                notebook=notebook,
            )
        )
        if not beside and not self._kept:
            self._record = None
        if not beside and (self._beside is None or self._beside.done()):
            self.beside_variables.clear()  # as the runner: the second kernel ends

    async def _emit(self, event: wire.Event) -> None:
        if self._frozen or self._ended:
            return
        record = self._record
        if (
            record is not None
            and isinstance(event, wire.Output | wire.Done)
            and event.id == record[0]
        ):
            record[2].append(event)
        self._put(wire.encode(event))

    def unheard(self) -> None:
        """Detached: what it said and says from now on reaches nobody (as a closed stream)."""
        self.heard = False
        while not self._events.empty():
            self._events.get_nowait()

    async def _notice(self, message: str) -> None:
        self.notices += 1
        if self.notices <= NOTICE_LIMIT:
            await self._emit(wire.Log(message=message))

    def _end(self) -> None:
        if not self._ended:
            self._ended = True
            self._put(None)

    @staticmethod
    def _notebook(cells: Sequence[tuple[str, Sequence[Mapping[str, Any]]]]) -> dict[str, Any]:
        return {
            "nbformat": 4,
            "nbformat_minor": 5,
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}},
            "cells": [
                {
                    "cell_type": "code",
                    "id": uuid.uuid4().hex[:8],
                    "metadata": {},
                    "execution_count": index + 1,
                    "source": code,
                    "outputs": [dict(output) for output in outputs],
                }
                for index, (code, outputs) in enumerate(cells)
            ],
        }


async def _received(
    events: asyncio.Queue[dict[str, Any] | None], ended: bool
) -> dict[str, Any] | None:
    if ended and events.empty():
        return None
    event = await events.get()
    if event is BROKEN:
        raise ChannelDamaged("1 of the runner's messages arrived broken (the fake's script)")
    return event


class FakeAttachment:
    """Another host's attachment to a fake sandbox, as a replica that took its session over
    has: it hears everything the runner says from its attach on (so does the first host,
    until it lets go), and speaks to the same runner."""

    def __init__(self, sandbox: FakeSandbox) -> None:
        self.sandbox = sandbox
        self.events: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.heard = True
        sandbox.attachments.append(self)

    @property
    def id(self) -> str:
        return self.sandbox.id

    @property
    def alive(self) -> bool:
        return self.sandbox.alive

    @property
    def address(self) -> str | None:
        return self.sandbox.address

    async def put_files(self, tar: bytes) -> None:
        await self.sandbox.put_files(tar)

    async def send(self, request: Mapping[str, Any]) -> None:
        await self.sandbox.send(request)

    async def receive(self) -> dict[str, Any] | None:
        return await _received(self.events, not self.sandbox.alive)

    async def get_files(
        self,
        caps: OutputCaps,
        unchanged: Mapping[str, bytes] | None = None,
        wanted: Collection[str] | None = None,
    ) -> ExtractedFiles:
        return await self.sandbox.get_files(caps, unchanged, wanted)

    async def exit_state(self) -> ExitState:
        return await self.sandbox.exit_state()

    async def kill(self) -> None:
        await self.sandbox.kill()

    async def destroy(self) -> None:
        await self.sandbox.destroy()

    def unheard(self) -> None:
        self.heard = False
        while not self.events.empty():
            self.events.get_nowait()


class FakeBackend:
    """Sandboxes that exist only in this process, running cells from `script`."""

    def __init__(
        self,
        script: Script | None = None,
        *,
        start_s: float = 0.0,
        keeps_sessions: bool = False,
        pausable: bool = False,
        instance: str = "default",
    ) -> None:
        self.instance = instance
        """The label this backend's sandboxes get (a replica's, `Settings.sandbox_instance`):
        `recover` and `remove_leftovers` see only sandboxes of its label."""
        self.script: Script = script if script is not None else {}
        self.pausable = pausable
        """Whether sessions can be paused to memory snapshots (SnapshotKeeper), as gVisor
        sandboxes on an engine with checkpoints can: a paused fake keeps its variables,
        those a workspace cannot save too, and loses its files, as a real one does."""
        self.paused: dict[str, FakeSandbox] = {}
        self.refuse_pause: str | None = None
        """Set to a reason to make pausing fail."""
        self.refuse_resume: str | None = None
        """Set to a reason to make resuming fail (as for a tampered snapshot)."""
        self.keeps_sessions = keeps_sessions
        """Whether sessions' sandboxes outlive an executor (SessionKeeper): the next
        executor on this backend finds them again, as one on a cluster would."""
        self.detached: set[FakeSandbox] = set()
        self.default = FakeRun()
        self.start_s = start_s
        self.runs: list[str] = []
        """Every cell the fake was asked to run, in order."""
        self.asked: list[wire.Run] = []
        """Every run asked of its sandboxes, as the runner decoded it (language, env, cwd)."""
        self.restores: list[list[str]] = []
        """The variables each restore loaded, in order: a real kernel unpickles (runs) them."""
        self.snapshot_s: dict[str, float] = {}
        """How long a snapshot (pickling the variables) takes in a session (by its key), as
        with an object whose `__getstate__` is slow."""
        self.installs: list[list[str]] = []
        """The packages each `install` asked for, in order."""
        self.index: set[str] | None = None
        """The pins the package index holds (None: any)."""
        self.live: set[FakeSandbox] = set()
        self.started = 0
        self.every: list[FakeSandbox] = []
        """Every sandbox started, in order (removed ones too)."""
        self.unavailable: str | None = None
        """Set to a message to make the next start fail as an engine outage does."""

    def replica(self, instance: str) -> FakeBackend:
        """Another replica's backend on the same fake cluster: it sees the same sandboxes
        (to adopt by id) and labels its own with `instance`."""
        other = FakeBackend(
            self.script,
            start_s=self.start_s,
            keeps_sessions=self.keeps_sessions,
            pausable=self.pausable,
            instance=instance,
        )
        for shared in ("paused", "detached", "runs", "restores", "snapshot_s", "installs"):
            setattr(other, shared, getattr(self, shared))
        other.live, other.every = self.live, self.every
        return other

    def lookup(self, code: str) -> FakeRun:
        if callable(self.script):
            found = self.script(code)
        else:
            found = self.script.get(code.strip())
            if found is None:
                for pattern, run in self.script.items():
                    if pattern.startswith("re:") and re.search(pattern[3:], code):
                        found = run
                        break
        return found or self.default

    async def check(self, runtime: str = "runc") -> None:
        return None

    async def start(self, limits: SandboxLimits, input_tar: bytes | None) -> FakeSandbox:
        if self.unavailable is not None:
            raise EngineUnavailable(self.unavailable)
        if self.start_s:
            await asyncio.sleep(self.start_s)
        sandbox = FakeSandbox(self, limits)
        if input_tar:
            await sandbox.put_files(input_tar)
        self.started += 1
        self.live.add(sandbox)
        self.every.append(sandbox)
        await sandbox._emit(wire.Ready(python="3.11 (fake)", startup_ms=0))
        await sandbox._emit(wire.Warm())
        return sandbox

    async def remove_leftovers(self, keep: Collection[str] = ()) -> int:
        gone = [s for s in self.detached if s.id not in keep and s.instance == self.instance]
        for sandbox in gone:
            self.detached.discard(sandbox)
            await sandbox.destroy()
        return len(gone)

    async def recover(self, skip: Collection[str] = ()) -> list[Recovered]:
        # As a real backend lists its label's sandboxes: those left running, and those
        # another replica is attached to now (which only `skip` keeps this one from).
        found = [
            s
            for s in self.every
            if s.session
            and s.alive
            and s.instance == self.instance
            and s.id not in skip
            and s.id not in self.paused
            and (s in self.detached or (s.holder is not None and s.holder is not self))
        ]
        claimed: list[Recovered | None] = []
        for sandbox in found:
            if sandbox in self.detached:
                self.detached.discard(sandbox)
                sandbox.heard = True
                sandbox.holder = self
                claimed.append(await claimed_session(sandbox, RESUME_ANSWER_S))
            else:
                claimed.append(await self.adopt(sandbox.id))
        return [item for item in claimed if item is not None]

    async def adopt(self, sandbox_id: str) -> Recovered | None:
        found = next((s for s in self.every if s.id == sandbox_id), None)
        if found is None or not found.alive or found.id in self.paused:
            return None
        attachment = FakeAttachment(found)
        claimed = await claimed_session(attachment, RESUME_ANSWER_S)
        if claimed is None:
            attachment.unheard()
            return None
        self.detached.discard(found)
        found.holder = self
        return claimed

    async def detach(self, sandbox: Sandbox) -> None:
        if isinstance(sandbox, FakeSandbox | FakeAttachment):
            sandbox.unheard()
            underlying = sandbox.sandbox if isinstance(sandbox, FakeAttachment) else sandbox
            if underlying.holder is self:  # nobody else is attached: a later process may be
                underlying.holder = None
                self.detached.add(underlying)

    async def pause_refusal(self, limits: SandboxLimits) -> str | None:
        return None if self.pausable else "the fake backend was made without snapshots"

    async def pause(self, sandbox: Sandbox, max_mb: int) -> PausedSandbox:
        if not isinstance(sandbox, FakeSandbox) or self.refuse_pause is not None:
            raise SnapshotFailed(self.refuse_pause or "not a fake sandbox")
        sandbox.files.clear()  # the data folder is a tmpfs that the stop empties
        self.paused[sandbox.id] = sandbox
        self.live.discard(sandbox)
        return PausedSandbox("fake", sandbox.id, "paused", "00" * 32, time.time())

    async def resume(self, paused: PausedSandbox, session: str) -> FakeSandbox:
        sandbox = self.paused.pop(paused.sandbox, None)
        if sandbox is None:
            raise SnapshotFailed("its sandbox is gone (removed, or the engine was reset)")
        if self.refuse_resume is not None or sandbox.session != session:
            await sandbox.destroy()
            raise SnapshotFailed(self.refuse_resume or "it holds another conversation's session")
        sandbox.keys += 1
        sandbox.holder = self
        self.live.add(sandbox)
        return sandbox

    async def remove_paused(self, paused: PausedSandbox) -> None:
        sandbox = self.paused.pop(paused.sandbox, None)
        if sandbox is not None:
            await sandbox.destroy()

    async def close(self) -> None:
        for sandbox in list(self.live - self.detached):
            if sandbox.holder is self:
                with contextlib.suppress(Exception):
                    await sandbox.destroy()


__all__ = [
    "FakeAttachment",
    "FakeBackend",
    "FakeRun",
    "FakeSandbox",
    "image",
    "result",
    "stderr",
    "stdout",
]
