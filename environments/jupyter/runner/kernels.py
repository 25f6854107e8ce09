"""Starting a kernel the runner's way, and the second kernel that runs code beside a run
of the first that goes on (wire `Run.kernel` "beside"): its own notebook and variables,
the same /mnt/data, started on its first run and shut down when neither kernel runs."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
from nbclient.exceptions import CellExecutionError, DeadKernelError

from executor import wire
from runner.client import CappedClient, DeepQueueKernelClient
from runner.files import DATA_DIR, snapshot
from runner.kernel_scripts import DATA_OFF, IOPUB_GRACE_S, KERNEL_SETUP, WARM_LIMIT_S, WARM_MARK
from runner.run_scope import OutsideData, scope, working_folder
from runner.stdin import Secrets
from runner.system import descendants, kernel_exit_code, oom_kills, preload_modules, stopped

KERNEL_LAUNCH = Path(__file__).with_name("kernel_launch.py")


def new_client(nb: Any, emit: Callable[[wire.Event], None], secrets: Secrets) -> CappedClient:
    return CappedClient(
        nb,
        emit,
        secrets,
        timeout=None,
        allow_errors=False,
        kernel_name="python3",
        record_timing=True,
        iopub_timeout=IOPUB_GRACE_S,
        shutdown_kernel="immediate",
    )


def new_notebook() -> Any:
    nb = nbformat.v4.new_notebook()  # type: ignore[no-untyped-call]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    return nb


async def start_kernel(client: CappedClient) -> None:
    """Start the client's kernel in /mnt/data, set up as every kernel of the runner is."""
    client.km = client.create_kernel_manager()
    client.km.client_factory = DeepQueueKernelClient
    spec = client.km.kernel_spec
    # `python -P -s .../kernel_launch.py -f ...` (see DATA_OFF) for `python -m
    # ipykernel_launcher -f ...`.
    launcher = spec.argv.index("ipykernel_launcher")
    spec.argv = [spec.argv[0], "-P", "-s", str(KERNEL_LAUNCH), *spec.argv[launcher + 1 :]]
    await client.async_start_new_kernel(cwd=str(DATA_DIR))
    await client.async_start_new_kernel_client()
    await client.kc.execute_interactive(
        KERNEL_SETUP.replace("DATA_OFF", DATA_OFF)
        .replace("WARM_MARK_PATH", repr(str(WARM_MARK)))
        .replace("WARM_JOIN_S", str(WARM_LIMIT_S))
        .replace("PRELOAD", repr(preload_modules())),
        silent=True,
        store_history=False,
    )


def kernel_process(client: CappedClient) -> Any:
    """The kernel's Popen, or None."""
    provisioner = getattr(client.km, "provisioner", None)
    return getattr(provisioner, "process", None)


async def run_cells(
    client: CappedClient, nb: Any, cells: tuple[str, ...]
) -> tuple[str, int | None, bool]:
    """Run cells in order in the client's kernel, stopping at the first error: the status
    (ok, error, died), the kernel's exit code and whether it ran out of memory."""
    oom_before = oom_kills()
    for source in cells:
        cell = nbformat.v4.new_code_cell(source)  # type: ignore[no-untyped-call]
        nb.cells.append(cell)
        try:
            await client.async_execute_cell(cell, len(nb.cells) - 1)
        except CellExecutionError as exc:
            if not any(output.get("output_type") == "error" for output in cell.outputs):
                # Some kernels (tslab) only print the error and say so in their reply: the
                # host gets it as data all the same.
                output = error_from_stderr(cell.outputs, exc.ename, exc.evalue)
                client.emit(wire.Output(id=client.run_id, cell=len(nb.cells) - 1, output=output))
            return "error", None, False
        except DeadKernelError:
            return "died", await kernel_exit_code(client), oom_kills() > oom_before
    return "ok", None, False


STDERR_ERROR = re.compile(r"^(?P<name>(?:[A-Za-z_$][\w$.]*)?(?:Error|Exception)): ?(?P<value>.*)$")
TYPE_ERROR = re.compile(r"^\d+:\d+ - ")


def error_from_stderr(outputs: list[Any], ename: str, evalue: str) -> dict[str, Any]:
    """An nbformat error output for a cell whose kernel raised none: its name and value
    from the reply, or else from what the cell wrote to stderr (its last lines kept as the
    traceback)."""
    lines = [
        line
        for output in outputs
        if output.get("output_type") == "stream" and output.get("name") == "stderr"
        for line in str(output.get("text", "")).splitlines()
    ]
    name = "" if ename in ("", "<Error>") else ename
    value = evalue
    if not name:
        found = next((m for line in lines if (m := STDERR_ERROR.match(line.strip()))), None)
        if found is not None:
            name, value = found["name"], value or found["value"]
        elif any(TYPE_ERROR.match(line) for line in lines):
            name = "CompileError"
            value = value or next(line for line in lines if TYPE_ERROR.match(line))
        else:
            name = "Error"
            value = value or next((line for line in reversed(lines) if line.strip()), "")
    return {
        "output_type": "error",
        "ename": name,
        "evalue": value[:2000],
        "traceback": lines[-50:] or [f"{name}: {value}"],
    }


def error_output(run_id: str, name: str, value: str) -> wire.Output:
    """An error as the kernel would have raised it, for what fails before the code runs."""
    output = {"output_type": "error", "ename": name, "evalue": value, "traceback": [value]}
    return wire.Output(id=run_id, cell=0, output=output)


ABORTS_AFTER_ERROR_S = {"javascript": 0.3, "typescript": 0.3}
"""tslab aborts every request that reaches it within 200 ms after an error (its queue's
reset; a stopped kernel's timer does not run): the next request waits for that to pass."""
SCOPE_TIMEOUT_S = 30


def start_caps(client: CappedClient, request: wire.Run) -> None:
    """The client counts the run's output against the run's caps, from nothing."""
    client.run_id = request.id
    client.text_limit = request.output_limit
    client.rich_limit = request.rich_limit
    client.rich_count_limit = request.rich_count_limit
    client.reset_caps()


async def scoped_cells(
    client: CappedClient, nb: Any, request: wire.Run, language: str = "python"
) -> tuple[str, int | None, bool]:
    """The run's cells (`run_cells`) within the run's own env and working folder, which the
    kernel takes before them and puts back after them (runner.run_scope)."""
    try:
        around = scope(language, request.env, working_folder(request.cwd))
    except (OutsideData, OSError) as exc:
        client.emit(error_output(request.id, "WorkingFolderError", str(exc)))
        return "error", None, False
    if around is not None:
        await client.kc.execute_interactive(
            around.before, silent=True, store_history=False, timeout=SCOPE_TIMEOUT_S
        )
    status, exit_code, oom = await run_cells(client, nb, request.cells)
    if status == "error" and language in ABORTS_AFTER_ERROR_S:
        await asyncio.sleep(ABORTS_AFTER_ERROR_S[language])
    if around is not None and status != "died":
        with contextlib.suppress(Exception):
            await client.kc.execute_interactive(
                around.after, silent=True, store_history=False, timeout=SCOPE_TIMEOUT_S
            )
    return status, exit_code, oom


def run_done(
    request: wire.Run,
    client: CappedClient,
    nb: Any,
    before: dict[str, Any],
    outcome: tuple[str, int | None, bool],
) -> wire.Done:
    """A run's `Done`: its status, the files it changed since `before` (a `snapshot`)."""
    status, exit_code, oom = outcome
    after = snapshot()
    changed = sorted(path for path, stamp in after.items() if before.get(path) != stamp)
    counts = [c.get("execution_count") for c in nb.cells if c.get("execution_count")]
    return wire.Done(
        id=request.id,
        status=status,
        execution_count=counts[-1] if counts else None,
        truncated=client.truncated,
        dropped_results=client.dropped,
        changed=tuple(changed),
        exit_code=exit_code,
        oom=oom,
    )


class SideKernel:
    """A kernel beside the session's first: the second Python kernel (`BesideKernel`) or
    another language's (runner.languages), started on its first run. Its own processes
    (the kernel, and what it started to work, such as Bash's shell: recorded once it
    answers) are the only ones of its that outlive a run, and they rest stopped (SIGSTOP)
    between runs, as the first kernel does, so that nothing it started runs uncounted."""

    language = "python"

    def __init__(self, emit: Callable[[wire.Event], None], secrets: Secrets) -> None:
        self.emit = emit
        self.secrets = secrets
        self.nb = self.new_notebook()
        self.client = self.new_client()
        self.started = False
        self.frozen = False
        self.own: set[int] = set()

    def new_notebook(self) -> Any:
        return new_notebook()

    def new_client(self) -> CappedClient:
        return new_client(self.nb, self.emit, self.secrets)

    async def start(self) -> None:
        await start_kernel(self.client)

    def pid(self) -> int | None:
        pid = getattr(kernel_process(self.client), "pid", None)
        return pid if isinstance(pid, int) else None

    async def ensure_started(self) -> None:
        if not self.started:
            await self.start()
            self.started = True
            pid = self.pid()
            self.own = descendants(pid) if pid is not None else set()

    async def run(self, request: wire.Run, rest: bool = True) -> wire.Done:
        """Run the request's cells; then the kernel rests, unless `rest` is False (the host
        lets processes go on between runs). Its `Done`, for the caller to send once it has
        done what follows the run (a request that comes after it must find it over)."""
        await self.ensure_started()
        self.thaw()
        start_caps(self.client, request)
        before = snapshot()
        try:
            outcome = await scoped_cells(self.client, self.nb, request, self.language)
        finally:
            if rest:
                await self.rest()
        done = run_done(request, self.client, self.nb, before, outcome)
        if outcome[0] == "died":
            await self.shutdown()
        return done

    def thaw(self) -> None:
        if self.frozen:
            for pid in self.own:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGCONT)
        self.frozen = False

    async def rest(self) -> None:
        process = kernel_process(self.client)
        if self.frozen or process is None or process.poll() is not None:
            return
        for pid in self.own:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGSTOP)
        self.frozen = True
        await stopped(process)

    async def interrupt(self) -> None:
        if self.started and not self.frozen and self.client.km is not None:
            await self.client.km.interrupt_kernel()

    async def shutdown(self) -> None:
        """End the kernel (its variables go; its files stay in /mnt/data)."""
        if self.client.km is None:
            self.started = False
            return
        self.thaw()
        with contextlib.suppress(Exception):
            await self.client._async_cleanup_kernel()
        self.started = False
        self.own = set()
        self.nb = self.new_notebook()
        self.client = self.new_client()


class BesideKernel(SideKernel):
    """The second Python kernel (wire `Run.kernel` "beside"): its own variables, the same
    /mnt/data, one run at a time beside a run of the first."""

    def __init__(self, emit: Callable[[wire.Event], None], secrets: Secrets) -> None:
        super().__init__(emit, secrets)
        self.running: asyncio.Task[None] | None = None

    @property
    def busy(self) -> bool:
        return self.running is not None and not self.running.done()
