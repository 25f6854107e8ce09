"""The runner: one Jupyter kernel, driven by the host's requests (executor/wire/)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nbformat

from executor import wire
from runner.client import NoKey, StderrTail
from runner.files import DATA_DIR, files_op, read_at_most, snapshot
from runner.kept import RunRecord
from runner.kernel_scripts import (
    KERNEL_REAP,
    PREVIEW_SCRIPT,
    RESEED_CODE,
    RESTORE_CODE,
    SNAPSHOT_CODE,
    WARM_LIMIT_S,
    WARM_MARK,
    WARM_POLL_S,
    WITH_DATA_OFF,
)
from runner.kernels import (
    BesideKernel,
    kernel_process,
    new_client,
    new_notebook,
    scoped_cells,
    start_kernel,
)
from runner.languages import LanguageKernel, available_languages, unavailable
from runner.packages import INSTALL_CODE, INSTALL_TIMEOUT_S, installed
from runner.r_workspace import RDATA, load_r, names, reasons, save_r
from runner.stdin import InputRelay, Secrets
from runner.streams import Uploads, read_chunk
from runner.system import (
    ignore,
    is_stopped,
    limit_file_size,
    make_unreadable,
    pids,
    prepare_writable_dirs,
    processes,
    stdin_reader,
    stopped,
)

KERNEL_LAUNCH = Path(__file__).with_name("kernel_launch.py")
PREVIEW_TIMEOUT_S = 30
WORKSPACE_TIMEOUT_S = 120
STDERR_TAIL_BYTES = 16 * 1024
STDERR_REPORT_CHARS = 4000
NOTICE_LIMIT = 20
STOP_WAIT_S = 5.0
PR_SET_DUMPABLE = 4
REAP_INTERVAL_S = 1.0
KILL_ROUNDS = 200


class Runner:
    def __init__(self, out: Any, stderr: StderrTail) -> None:
        self.out = out
        self.stderr = stderr
        self.nb = new_notebook()
        self.secrets = Secrets()
        """Answers to `getpass()`: masked in every later output, left out of snapshots."""
        self.client = new_client(self.nb, self.emit, self.secrets)
        self.beside = BesideKernel(self.emit, self.secrets)
        """The second kernel, for code run beside a run of this one (wire `Run.kernel`)."""
        self.others: dict[str, LanguageKernel] = {}
        """Other languages' kernels, each started on its first run (wire `Run.language`)."""
        self.languages: tuple[str, ...] = ("python",)
        self.running: asyncio.Task[None] | None = None
        self.side_tasks: set[asyncio.Task[None]] = set()
        self.helpers: set[int] = set()
        """Processes the runner itself started (previews), which it waits for itself."""
        self.sealer: wire.Sealer | None = None
        self.opener: wire.Opener | None = None
        """The key's numbering each way, once the host's hello gave the key."""
        self.session = ""
        """Whose session the host said this sandbox holds, for it to find again later."""
        self.notices = 0
        self.kernel_turn = asyncio.Lock()
        """Held while the kernel works for a request, and while it is put to rest after."""
        self.frozen = False
        self.awake = asyncio.Event()
        """Set while the kernel is not stopped: the warm-up goes on only then."""
        self.awake.set()
        self.warm = False
        self.user_code_ran = False
        """A run or a restore (the user's code) has run: from then on the kernel rests
        between requests, whether or not the warm-up has finished."""
        self.background = False
        self.reap_in_kernel = False
        self.input_relay: InputRelay | None = None
        self.record: RunRecord | None = None
        """The run in progress, or the last one if the host kept it (see runner.kept)."""
        self.uploads = Uploads()
        """Files being written in chunks (wire `WriteChunk`)."""

    def notice(self, message: str) -> None:
        """A `log` event, a limited number of times: lines the user's code may write into the
        runner's stdin (gVisor lets it) must not become a flood of events to the host."""
        self.notices += 1
        if self.notices <= NOTICE_LIMIT:
            self.emit(wire.Log(message=message))

    def emit(self, event: wire.Event) -> None:
        if self.sealer is None:
            raise RuntimeError("no event before the host's hello gave the key")
        if self.record is not None:
            self.record.note(event)
        self.out.write(self.sealer.line(wire.encode(event)).decode())

    def follow(self, request: wire.Follow) -> None:
        """A host that attached again takes over a kept run: all it said so far, again
        (nothing it writes while no host listens reaches anyone), then the rest as it comes."""
        record = self.record
        if record is None or not record.kept or record.id != request.id:
            self.emit(wire.Following(id=request.id))
            return
        self.emit(record.following())
        self.record = None  # what is sent again is not recorded again
        try:
            for event in list(record.events):
                self.emit(event)
            asking = self.input_relay.asking if self.input_relay is not None else None
            if asking is not None and asking.id == record.id and not record.ended:
                self.emit(asking)
        finally:
            self.record = record

    def open_request(self, line: bytes) -> wire.Request | None:
        """The request in a line the host sealed; None when it is not sealed, Malformed when
        it is not a declared request."""
        payload = self.opener.open(line) if self.opener is not None else None
        return None if payload is None else wire.decode_request(payload)

    async def start(self, reader: asyncio.StreamReader) -> None:
        started = time.monotonic()
        prepare_writable_dirs()
        await start_kernel(self.client)
        self.languages = available_languages()
        ready = wire.Ready(
            python=sys.version.split()[0],
            startup_ms=round((time.monotonic() - started) * 1000),
            languages=self.languages,
        )
        # The host may attach only after the start (a Kubernetes Pod), so it speaks first.
        key = wire.hello_key(await reader.readline())
        if key is None:
            raise NoKey("the host's first line was not a hello with a key: the runner stops")
        self.sealer, self.opener = wire.Sealer(key), wire.Opener(key)
        self.emit(ready)
        self.stderr.stop_reporting()

    async def run(self, request: wire.Run) -> None:
        run_id = request.id
        self.emit(wire.Started(id=run_id))  # before any of its code: the host's "nothing ran"
        before = snapshot()
        self.record = RunRecord(run_id, kept=request.keep)
        self.client.run_id = run_id
        self.client.text_limit = request.output_limit
        self.client.rich_limit = request.rich_limit
        self.client.rich_count_limit = request.rich_count_limit
        self.client.reset_caps()
        self.background = request.background
        self.user_code_ran = True
        self.client.kc.allow_stdin = request.stdin
        relaying: asyncio.Task[None] | None = None
        if request.stdin:
            self.input_relay = InputRelay(self.client.kc, self.emit, self.secrets)
            relaying = asyncio.create_task(self.input_relay.relay(run_id))
        async with self.kernel_awake():
            status, exit_code, oom = await scoped_cells(self.client, self.nb, request)
        if relaying is not None:
            relaying.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await relaying
        # The kernel's other work (restores, snapshots) has nobody to answer its input().
        self.client.kc.allow_stdin = False
        self.input_relay = None
        after = snapshot()
        changed = sorted(path for path, stamp in after.items() if before.get(path) != stamp)
        if not self.beside.busy:  # before the Done: a run sent after it finds all over
            await self.beside.shutdown()
        counts = [c.get("execution_count") for c in self.nb.cells if c.get("execution_count")]
        self.emit(
            wire.Done(
                id=run_id,
                status=status,
                execution_count=counts[-1] if counts else None,
                truncated=self.client.truncated,
                dropped_results=self.client.dropped,
                changed=tuple(changed),
                exit_code=exit_code,
                oom=oom,
                notebook=self.nb if request.notebook else None,
            )
        )
        if self.record is not None and not self.record.kept:
            self.record = None

    async def run_other(self, request: wire.Run) -> None:
        """A run in another language's kernel; the Python kernel rests meanwhile."""
        if request.language not in self.languages:
            for event in unavailable(request.id, request.language, self.languages):
                self.emit(event)
            return
        self.emit(wire.Started(id=request.id))
        self.record = RunRecord(request.id, kept=request.keep)
        self.background = request.background
        self.user_code_ran = True
        kernel = self.others.get(request.language)
        if kernel is None:
            kernel = self.others[request.language] = LanguageKernel(
                request.language, self.emit, self.secrets
            )
        # Held for the whole run, as a Python run holds it: what ends leftovers between
        # requests (the warm-up's end, a run beside) must not take this kernel's processes.
        async with self.kernel_turn:
            done = await kernel.run(request, rest=not request.background)
            if not self.beside.busy:
                await self.beside.shutdown()
            await self.settle()
        self.emit(done)
        if self.record is not None and not self.record.kept:
            self.record = None

    def kept_pids(self) -> set[int]:
        """The kernels' own processes: never ended as leftovers of a run."""
        kernels = {self.kernel_pid(), self.beside.pid()}
        own = {pid for pid in kernels if pid is not None}
        for other in self.others.values():
            own |= other.own
        return own

    async def run_beside(self, request: wire.Run) -> None:
        """A run in the second kernel, beside this one's; once neither runs, that kernel
        ends, and what its code started with it."""
        self.emit(wire.Started(id=request.id))
        done = await self.beside.run(request, rest=not request.background)
        if self.running is None or self.running.done():
            await self.beside.shutdown()
            async with self.kernel_turn:
                await self.settle()
        self.emit(done)

    def kernel_process(self) -> Any:
        """The kernel's Popen, or None."""
        return kernel_process(self.client)

    def kernel_pid(self) -> int | None:
        pid = getattr(self.kernel_process(), "pid", None)
        return pid if isinstance(pid, int) else None

    @contextlib.asynccontextmanager
    async def kernel_awake(self) -> AsyncIterator[None]:
        """The kernel runs for the duration of a request (a run, restore, snapshot, `env`),
        and rests after it."""
        async with self.kernel_turn:
            await self.thaw()
            try:
                yield
            finally:
                await self.settle()

    async def thaw(self) -> None:
        process = self.kernel_process()
        if self.frozen and process is not None:
            with contextlib.suppress(OSError):
                os.kill(process.pid, signal.SIGCONT)
        self.frozen = False
        self.awake.set()
        if self.reap_in_kernel:
            self.reap_in_kernel = False
            with contextlib.suppress(Exception):
                await self.client.kc.execute_interactive(
                    KERNEL_REAP, silent=True, store_history=False, timeout=5
                )

    async def settle(self) -> None:
        """Between requests nothing may run, since nothing counts it: the kernel (every
        thread of it) is stopped first, so that it cannot start anything more, and then
        every other process is ended. Not where the host allows background work, nor while
        the warm-up of a sandbox that no code has used yet goes on."""
        if self.background or not (self.warm or self.user_code_ran):
            return
        process = self.kernel_process()
        if not self.frozen and process is not None and process.poll() is None:
            os.kill(process.pid, signal.SIGSTOP)
            self.frozen = True
            self.awake.clear()
            await stopped(process)
        if self.beside.busy and asyncio.current_task() is not self.beside.running:
            return  # what runs now may be the second kernel's code's; its end settles
        if await self.end_leftovers():
            # The kernel's own children that were killed wait for it to reap them, which it
            # does when it runs again.
            self.reap_in_kernel = True
            # An exit that orphans a process group with a stopped member makes the system
            # send that group SIGHUP and SIGCONT (job control): the kernel ignores SIGHUP
            # (KERNEL_SETUP), and is stopped again if it was continued.
            if process is not None and process.poll() is None and not is_stopped(process.pid):
                os.kill(process.pid, signal.SIGSTOP)
                await stopped(process)

    async def settle_when_warm(self) -> None:
        """A new sandbox's kernel rests once its warm-up is done, unless a request uses it."""
        self.warm = True
        async with self.kernel_turn:
            await self.settle()

    async def end_leftovers(self) -> bool:
        """End every process but the runner, the kernel and the runner's helpers: whatever
        the run started (children, daemons, renamed or re-parented ones) is found in /proc
        and killed, again until none is left, since some may fork in between. Whether any
        was."""
        keep = self.helpers | self.kept_pids()
        # Most runs start no process: the names in /proc tell that without reading each
        # one's state (every read is a system call, and those are dear under gVisor).
        if pids() <= keep | {os.getpid()}:
            return False
        killed = False
        for _ in range(KILL_ROUNDS):
            # As init, one kill(-1) stops every other process at once, so a chain that forks
            # and exits cannot outrun the scan below; the runner's helpers go on afterwards
            # (the kernel stays stopped: see settle).
            with contextlib.suppress(OSError):
                os.kill(-1, signal.SIGSTOP)
            others = [pid for pid, state, _ in processes() if pid not in keep and state != "Z"]
            for pid in self.helpers:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGCONT)
            if not others:
                break
            killed = True
            for pid in others:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            self.reap()
            await asyncio.sleep(0.005)
        self.reap()
        return killed

    def reap(self) -> None:
        """Wait for orphans that ended: as init, every re-parented process is the runner's."""
        kernels = self.kept_pids()
        if pids() <= self.helpers | kernels | {os.getpid()}:
            return
        for pid, state, parent in processes():
            if parent == os.getpid() and state == "Z" and pid not in kernels | self.helpers:
                with contextlib.suppress(OSError):
                    os.waitpid(pid, os.WNOHANG)

    async def say_when_warm(self) -> None:
        # A run that came before the warm-up ended leaves the kernel resting, its warm-up
        # halfway: the mark is looked for again (and the time counted) once a request wakes
        # it, not 50 times a second meanwhile.
        waited = 0.0
        while waited < WARM_LIMIT_S and not WARM_MARK.exists():
            if not self.awake.is_set():
                await self.awake.wait()
                continue
            await asyncio.sleep(WARM_POLL_S)
            waited += WARM_POLL_S
        self.emit(wire.Warm())
        await self.settle_when_warm()

    async def reap_loop(self) -> None:
        while True:
            await asyncio.sleep(REAP_INTERVAL_S)
            self.reap()

    def export(self, request: wire.Export) -> None:
        self.emit(wire.Exported(id=request.id, content=self.nb))

    async def preview(self, request: wire.Preview) -> None:
        paths = list(request.paths[:20])
        previews: dict[str, str] = {}
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-I",
                "-c",
                PREVIEW_SCRIPT,
                *paths,
                cwd=str(DATA_DIR),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
            )
            self.helpers.add(process.pid)
            output, _ = await asyncio.wait_for(process.communicate(), PREVIEW_TIMEOUT_S)
            found = json.loads(output or b"{}")
            previews = {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}
        except (TimeoutError, ValueError, OSError) as exc:
            previews = {path: f"{path}: no preview ({type(exc).__name__})" for path in paths}
            with contextlib.suppress(ProcessLookupError, UnboundLocalError):
                process.kill()
                await process.wait()
        finally:
            with contextlib.suppress(UnboundLocalError):
                self.helpers.discard(process.pid)
        self.emit(wire.Previewed(id=request.id, previews=previews))

    async def in_kernel(
        self, code: str, folder: Path, timeout_s: float = WORKSPACE_TIMEOUT_S
    ) -> dict[str, Any]:
        """Run one of the workspace scripts in the user's kernel; its report."""
        script = WITH_DATA_OFF + code.replace("FOLDER", repr(str(folder)))
        async with self.kernel_awake():
            reply = await self.client.kc.execute_interactive(
                script, silent=True, store_history=False, timeout=timeout_s
            )
        content = reply.get("content", {}) if isinstance(reply, dict) else {}
        if content.get("status") != "ok":
            raise RuntimeError(f"{content.get('ename', 'error')}: {content.get('evalue', '')}")
        report = json.loads((folder / "report.json").read_text())
        return report if isinstance(report, dict) else {}

    async def snapshot(self, request: wire.Snapshot) -> None:
        """The session's variables (pickled in the kernel, and R's when its kernel ran) and
        the cells run so far."""
        limit = request.max_bytes
        event = wire.SnapshotTaken(id=request.id)
        folder = Path(tempfile.mkdtemp(prefix="cellmate-workspace-"))
        try:
            code = SNAPSHOT_CODE.replace("LIMIT", str(limit))
            report = await self.in_kernel(code.replace("SECRETS", repr(self.secrets.hex())), folder)
            variables = read_at_most(folder / "variables.pkl", limit + 1_000_000)
            if len(variables) > limit + 500_000:
                raise ValueError("the saved variables are larger than the cap")
            r_variables, r_saved, r_skipped = await self.snapshot_r(folder, limit - len(variables))
            event = wire.SnapshotTaken(
                id=request.id,
                variables=base64.b64encode(variables).decode(),
                saved=tuple(str(name) for name in report.get("saved", [])),
                skipped={str(k): str(v) for k, v in dict(report.get("skipped", {})).items()},
                cells=tuple(str(cell.source) for cell in self.nb.cells)[-500:],
                packages=installed(),
                r_variables=base64.b64encode(r_variables).decode() if r_variables else "",
                r_saved=r_saved,
                r_skipped=r_skipped,
            )
        except Exception as exc:
            event = wire.SnapshotTaken(id=request.id, error=problem(exc))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        self.emit(event)

    async def snapshot_r(
        self, folder: Path, limit: int
    ) -> tuple[bytes, tuple[str, ...], dict[str, str]]:
        """R's variables when its kernel ran (an .RData file, written in the snapshot's
        `folder`), their names, and those not saved with why; a save that fails is one entry
        named "", and the rest still saves."""
        kernel = self.others.get("r")
        if kernel is None or not kernel.started:
            return b"", (), {}
        try:
            async with self.kernel_turn:
                report = await save_r(kernel, folder, limit, self.secrets.hex())
            data = read_at_most(folder / RDATA, max(limit, 0) + 1_000_000)
            if len(data) > max(limit, 0) + 500_000:
                raise ValueError("R's saved variables are larger than the cap")
            return data, names(report.get("saved")), reasons(report.get("skipped"))
        except Exception as exc:
            return b"", (), {"": problem(exc)}

    async def restore(self, request: wire.Restore) -> None:
        """Load saved variables into the kernels (R's started for its own), and the cells
        run before into the notebook."""
        event = wire.Restored(id=request.id)
        folder = Path(tempfile.mkdtemp(prefix="cellmate-workspace-"))
        try:
            report: dict[str, Any] = {}
            self.user_code_ran = True  # loading a pickle (or an .RData file) may run any code
            if request.variables:
                (folder / "variables.pkl").write_bytes(base64.b64decode(request.variables))
                report = await self.in_kernel(RESTORE_CODE, folder)
            r_restored, r_failed = await self.restore_r(folder, request.r_variables)
            event = wire.Restored(
                id=request.id,
                restored=tuple(str(name) for name in report.get("restored", [])),
                failed={str(k): str(v) for k, v in dict(report.get("failed", {})).items()},
                r_restored=r_restored,
                r_failed=r_failed,
            )
            for source in request.cells[:500]:
                self.nb.cells.append(nbformat.v4.new_code_cell(source))  # type: ignore[no-untyped-call]
        except Exception as exc:
            event = wire.Restored(id=request.id, error=problem(exc))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        self.emit(event)

    async def restore_r(self, folder: Path, saved: str) -> tuple[tuple[str, ...], dict[str, str]]:
        """Load R's saved variables (base64 .RData, put in the restore's `folder`), starting
        R's kernel; what came back, and what did not with why (all of it under "" when the
        load failed)."""
        if not saved:
            return (), {}
        if "r" not in self.languages:
            return (), {"": "this sandbox has no R kernel"}
        kernel = self.others.get("r")
        if kernel is None:
            kernel = self.others["r"] = LanguageKernel("r", self.emit, self.secrets)
        try:
            (folder / RDATA).write_bytes(base64.b64decode(saved))
            async with self.kernel_turn:
                report = await load_r(kernel, folder)
            return names(report.get("restored")), reasons(report.get("failed"))
        except Exception as exc:
            return (), {"": problem(exc)}

    async def install(self, request: wire.Install) -> None:
        """Install a restored workspace's packages again (pins only: the decoder let nothing
        else through), before its variables, which may need them, are loaded."""
        event = wire.Installed(id=request.id)
        folder = Path(tempfile.mkdtemp(prefix="cellmate-install-"))
        try:
            (folder / "wanted.json").write_text(json.dumps(list(request.packages)))
            report = await self.in_kernel(INSTALL_CODE, folder, INSTALL_TIMEOUT_S + 30)
            ok = bool(report.get("ok"))
            event = wire.Installed(
                id=request.id, ok=ok, error=None if ok else str(report.get("error", ""))[-1500:]
            )
        except Exception as exc:
            event = wire.Installed(id=request.id, error=problem(exc))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        self.emit(event)

    async def set_env(self, request: wire.Env) -> None:
        """Set environment variables in the kernel (the host allowed their names)."""
        values = dict(request.values)
        # repr() makes a Python literal of the JSON text: the values cannot become code.
        script = (
            "import os as _o, json as _j\n"
            f"_o.environ.update(_j.loads({json.dumps(values)!r}))\n"
            "del _o, _j"
        )
        async with self.kernel_awake():
            reply = await self.client.kc.execute_interactive(
                script, silent=True, store_history=False, timeout=30
            )
        content = reply.get("content", {}) if isinstance(reply, dict) else {}
        self.emit(wire.EnvSet(id=request.id, ok=content.get("status") == "ok"))

    async def rekey(self, request: wire.Rekey) -> None:
        """Take the host's new key at once (its next lines are sealed with it), forget the
        old one, and answer under the new key once the kernel is re-seeded when asked."""
        key = bytes.fromhex(request.key)
        self.sealer, self.opener = wire.Sealer(key), wire.Opener(key)
        reseeded = False
        if request.reseed:
            async with self.kernel_awake():
                reply = await self.client.kc.execute_interactive(
                    RESEED_CODE, silent=True, store_history=False, timeout=30
                )
            content = reply.get("content", {}) if isinstance(reply, dict) else {}
            reseeded = content.get("status") == "ok"
        self.emit(wire.Rekeyed(nonce=request.nonce, reseeded=reseeded))

    async def interrupt(self, request: wire.Interrupt) -> None:
        if request.language != "python":
            other = self.others.get(request.language)
            if other is not None:
                await other.interrupt()
            return
        if request.kernel == "beside":
            await self.beside.interrupt()
            return
        # A resting kernel runs nothing to interrupt; the signal would wait for it, and stop
        # the next request's code instead.
        if self.client.km is not None and not self.frozen:
            await self.client.km.interrupt_kernel()

    async def dispatch(self, request: wire.Request) -> None:
        """Start (or do) what a request asks; the kernel's work goes one at a time."""
        if isinstance(request, wire.Run) and request.language != "python":
            if self.running is not None and not self.running.done():
                self.notice("a run is already in progress")
                return
            self.running = asyncio.create_task(self.run_other(request))
        elif isinstance(request, wire.Run) and request.kernel == "beside":
            if self.beside.busy:
                self.notice("a run is already in progress beside")
                return
            self.beside.running = asyncio.create_task(self.run_beside(request))
        elif isinstance(request, wire.Run):
            if self.running is not None and not self.running.done():
                self.notice("a run is already in progress")
                return
            self.running = asyncio.create_task(self.run(request))
        elif isinstance(request, wire.Interrupt):
            await self.interrupt(request)
        elif isinstance(request, wire.InputReply):
            if self.input_relay is not None:
                self.input_relay.answer(request)
        elif isinstance(request, wire.Export):
            if self.running is not None and not self.running.done():
                await asyncio.wait([self.running])
            self.export(request)
        elif isinstance(request, wire.Preview):
            self.side_tasks.add(task := asyncio.create_task(self.preview(request)))
            task.add_done_callback(self.side_tasks.discard)
        elif isinstance(request, wire.Snapshot):
            self.running = asyncio.create_task(after(self.running, self.snapshot(request)))
        elif isinstance(request, wire.Restore):
            self.running = asyncio.create_task(after(self.running, self.restore(request)))
        elif isinstance(request, wire.Install):
            self.running = asyncio.create_task(after(self.running, self.install(request)))
        elif isinstance(request, wire.Env):
            self.running = asyncio.create_task(after(self.running, self.set_env(request)))
        elif isinstance(request, wire.Fs):
            self.emit(files_op(request))
        elif isinstance(request, wire.ReadChunk):
            self.emit(read_chunk(request))
        elif isinstance(request, wire.WriteChunk):
            self.emit(self.uploads.write(request))
        elif isinstance(request, wire.Claim):
            self.session = request.session
        elif isinstance(request, wire.Rekey):
            await self.rekey(request)
        elif isinstance(request, wire.Keep):
            if self.record is not None and self.record.id == request.id:
                self.record.kept = True
        elif isinstance(request, wire.Follow):
            self.follow(request)
        elif isinstance(request, wire.Resume):
            busy = self.running is not None and not self.running.done()
            kept = self.record.id if self.record is not None and self.record.kept else ""
            self.emit(wire.Resumed(nonce=request.nonce, session=self.session, busy=busy, kept=kept))

    async def serve(self) -> None:
        reader = await stdin_reader()
        await self.start(reader)
        reaper = asyncio.create_task(self.reap_loop())
        warming = asyncio.create_task(self.say_when_warm())
        while True:
            line = await reader.readline()
            if not line:
                break
            try:
                request = self.open_request(line)
            except wire.Malformed:
                self.notice("malformed request ignored")
                continue
            if request is None:
                self.notice("unsealed request ignored")
                continue
            if isinstance(request, wire.Shutdown):
                break
            await self.dispatch(request)
        reaper.cancel()
        warming.cancel()
        if self.running is not None:
            self.running.cancel()
        process = self.kernel_process()
        if self.frozen and process is not None:
            with contextlib.suppress(OSError):
                os.kill(process.pid, signal.SIGCONT)
        await self.beside.shutdown()
        for other in self.others.values():
            await other.shutdown()
        await self.client._async_cleanup_kernel()


def problem(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:300]}"


async def after(previous: asyncio.Task[None] | None, work: Any) -> None:
    """Do `work` (a coroutine) once the kernel has finished what it was doing."""
    if previous is not None and not previous.done():
        await asyncio.wait([previous])
    await work


def main() -> None:
    make_unreadable()
    limit_file_size()
    signal.signal(signal.SIGINT, ignore)
    # Events go to a private copy of stdout; whatever else writes to descriptor 1 (the
    # kernel's children inherit it) goes nowhere.
    out = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    stderr = StderrTail()
    try:
        asyncio.run(Runner(out, stderr).serve())
    except NoKey as exc:
        stderr.report(f"{exc}\n")
        raise SystemExit(2) from None
    except BaseException:
        stderr.report(traceback.format_exc())
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
