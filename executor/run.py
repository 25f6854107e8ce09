"""One run of cells on a started sandbox: streaming, time limit, stop, and the verdict.

Shared by notebook mode and session mode; it speaks to the runner through `RunnerClient`,
and knows nothing of Docker or Kubernetes.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import signal
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from executor import wire
from executor.errors import ChannelDamaged, SandboxError
from executor.limits import SandboxLimits
from executor.models import InputExchange, OutputCollector, OutputEvent, Status
from executor.protocol import Sandbox
from executor.run_input import InputAsking, InputCallback, RunClock
from executor.run_scope import PYTHON, TITLES, RunScope
from executor.runner_client import RunnerClient

OutputCallback = Callable[[OutputEvent], Awaitable[None] | None]


@dataclass(slots=True)
class RunOutcome:
    """What the runner said (or failed to say) about one run."""

    status: str = "lost"
    """ok, error, died (kernel), lost (the sandbox's output ended)."""
    notebook: Mapping[str, Any] | None = None
    truncated: bool = False
    dropped_results: int = 0
    """Rich results the runner did not send, past the per-run count."""
    changed: list[str] = field(default_factory=list)
    kernel_exit_code: int | None = None
    execution_count: int | None = None
    kernel_oom: bool = False
    timed_out: bool = False
    stopped: bool = False
    killed_by_host: bool = False
    damaged: str = ""
    """Why the runner's channel can no longer be trusted (lines of it arrived broken): the
    sandbox was stopped, since what it says may be missing parts."""
    duration_ms: int = 0
    inputs: list[InputExchange] = field(default_factory=list)
    secret_given: bool = False
    """An answer to `getpass()` went into the kernel."""
    clock: RunClock | None = None
    """The run's clock, whose limit its caller may have raised."""
    not_kept: bool = False
    """A run this host followed (`follow`) that the runner no longer had."""
    earlier_ms: int = 0
    """A followed run: how long it had been going before this host took it over."""
    language: wire.Language = "python"
    started: bool = False
    """The runner said it took the run (`Started`): from then on its code may have run."""

    @property
    def nothing_ran(self) -> bool:
        """The sandbox's output ended before the runner took the run: none of its code ran,
        so it may run elsewhere (a stopped or timed-out run is not one)."""
        return (
            self.status == "lost"
            and not self.started
            and not (self.stopped or self.timed_out or self.killed_by_host or self.damaged)
        )

    @property
    def sandbox_usable(self) -> bool:
        """Whether the session's kernel, and its state, survived the run: another
        language's kernel that died takes only its own variables with it."""
        if self.killed_by_host:
            return False
        return self.status in ("ok", "error") or (
            self.status == "died" and self.language != "python"
        )


async def wait_ready(sandbox: Sandbox, timeout_s: float) -> int:
    """Wait for the runner's ready event; return its start-up time in ms."""
    try:
        async with asyncio.timeout(timeout_s):
            ready = await RunnerClient(sandbox).ready()
        if ready is None:
            tail = getattr(sandbox, "stderr_tail", "")
            raise SandboxError(
                f"the sandbox exited before its kernel was ready. {tail[-2000:]}".strip()
            )
        return ready.startup_ms
    except TimeoutError:
        raise SandboxError(f"the sandbox's kernel was not ready within {timeout_s:.0f} s") from None


async def wait_warm(sandbox: Sandbox) -> bool:
    """After ready: wait until the runner says its data stack is loaded (False: the sandbox
    stopped first)."""
    return await RunnerClient(sandbox).warm()


async def execute(
    sandbox: Sandbox,
    cells: Sequence[str],
    limits: SandboxLimits,
    collector: OutputCollector,
    *,
    on_output: OutputCallback | None = None,
    stop: asyncio.Event | None = None,
    want_notebook: bool = False,
    on_input: InputCallback | None = None,
    clock: RunClock | None = None,
    run_id: str = "",
    follow: bool = False,
    keep: bool = False,
    kernel: wire.Kernel = "",
    scope: RunScope = PYTHON,
) -> RunOutcome:
    """Run cells; on the time limit or a stop request, interrupt, then freeze the sandbox.
    With `on_input`, the code may ask for input, and the time limit waits while it does.
    `clock`: the caller's, to raise the limit while the run goes on (else the limits').
    `run_id`: the run's id (else a new one); `keep`: kept from its start (wire's `Keep`).
    With `follow`, no cells are sent: the kept run `run_id` is taken over, its outputs from
    the start (wire's `Follow`). `kernel`: which of the sandbox's Python kernels runs it;
    `scope`: the run's language, and its own environment variables and working folder."""
    outcome = RunOutcome(language=scope.language)
    if stop is not None and stop.is_set() and not follow:
        # Stopped while waiting for the sandbox: the code never starts, the kernel is as it was.
        outcome.status, outcome.stopped = "ok", True
        return outcome
    client = RunnerClient(sandbox)
    started = time.monotonic()
    if follow:
        await client.follow(run_id)
    else:
        run_id = await client.run(
            cells,
            output_limit=limits.output_bytes,
            rich_limit=limits.rich_output_bytes,
            rich_count_limit=limits.max_rich_results,
            background=limits.background_processes,
            notebook=want_notebook,
            stdin=on_input is not None,
            run_id=run_id,
            keep=keep,
            kernel=kernel,
            language=scope.language,
            env=scope.env,
            cwd=scope.cwd,
        )
    clock = clock or RunClock(limits.timeout_s)
    clock.start()
    outcome.clock = clock
    asking = InputAsking(client, on_input, clock)
    collecting = asyncio.create_task(
        _collect(client, run_id, collector, outcome, on_output, asking)
    )
    stopping = asyncio.create_task(stop.wait()) if stop is not None else None
    try:
        waiting: set[asyncio.Future[Any]] = {collecting} | ({stopping} if stopping else set())
        await _until_done_or_late(waiting, clock)
        if not collecting.done():
            outcome.stopped = stopping is not None and stopping.done()
            outcome.timed_out = not outcome.stopped
            # Interrupt first, so the kernel keeps its state; freeze it if the code ignores that.
            with contextlib.suppress(SandboxError):
                await client.interrupt(kernel, scope.language)
            await asyncio.wait({collecting}, timeout=limits.interrupt_grace_s)
            if not collecting.done():
                outcome.killed_by_host = True
                await sandbox.kill()
        await _finish(collecting)
        if outcome.damaged and not outcome.killed_by_host:
            outcome.killed_by_host = True
            await sandbox.kill()
    finally:
        await asking.close()
        outcome.inputs = list(asking.exchanges)
        outcome.secret_given = asking.secret_given
        for task in (collecting, stopping):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, SandboxError):
                    await task
    outcome.duration_ms = outcome.earlier_ms + round((time.monotonic() - started) * 1000)
    return outcome


async def _until_done_or_late(waiting: set[asyncio.Future[Any]], clock: RunClock) -> None:
    """Until one of `waiting` is done, or the run's time is up (not counting the time its
    code waited for input)."""
    while True:
        remaining = clock.remaining()
        if remaining is not None and remaining <= 0:
            if clock.over():
                return
            continue  # the limit was raised
        clock.changed.clear()
        changed = asyncio.ensure_future(clock.changed.wait())
        try:
            done, _ = await asyncio.wait(
                waiting | {changed}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            changed.cancel()
        if done & waiting:
            return


async def _finish(task: asyncio.Task[None]) -> None:
    if task.done():
        task.result()
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _collect(
    client: RunnerClient,
    run_id: str,
    collector: OutputCollector,
    outcome: RunOutcome,
    on_output: OutputCallback | None,
    asking: InputAsking,
) -> None:
    try:
        async for event in client.run_events(run_id):
            if isinstance(event, wire.InputRequest):
                asking.ask(event)
                continue
            if isinstance(event, wire.Started):
                outcome.started = True
                continue
            if isinstance(event, wire.Following):
                outcome.earlier_ms = event.elapsed_ms
                if not event.found:
                    # Nothing ran: the session (and its kernel) is as it was.
                    outcome.not_kept, outcome.status = True, "ok"
                    return
                continue
            if isinstance(event, wire.Output):
                update = collector.add(event.output)
                if update is not None and on_output is not None:
                    await _call(on_output, update)
                continue
            _done(outcome, event)
            return
    except ChannelDamaged as exc:
        outcome.damaged = str(exc)
    outcome.status = "lost"


def _done(outcome: RunOutcome, event: wire.Done) -> None:
    outcome.status = event.status
    outcome.notebook = event.notebook
    outcome.truncated = event.truncated
    outcome.dropped_results = event.dropped_results
    outcome.changed = list(event.changed)
    outcome.kernel_exit_code = event.exit_code
    outcome.execution_count = event.execution_count
    outcome.kernel_oom = event.oom


async def _call(callback: OutputCallback, event: OutputEvent) -> None:
    returned = callback(event)
    if inspect.isawaitable(returned):
        await returned


def judge(
    outcome: RunOutcome, container_oom: bool, container_exit: int | None, limits: SandboxLimits
) -> tuple[Status, str]:
    """The status of a run and, unless it is ok, why it ended, for a person."""
    if outcome.not_kept:
        return Status.KILLED, (
            "The run could not be followed after the restart: its sandbox no longer had it "
            "(something else ran there since)."
        )
    if outcome.stopped:
        if outcome.killed_by_host:
            return (
                Status.KILLED,
                "The run was stopped on request; the sandbox had to be stopped too.",
            )
        return Status.KILLED, "The run was stopped on request."
    if outcome.damaged:
        return Status.KILLED, (
            "Part of this run's output may be missing: code in the sandbox wrote into the "
            "channel its runner answers on and broke the runner's messages, so the sandbox "
            "was stopped."
        )
    if outcome.timed_out:
        how = "it was stopped" if outcome.killed_by_host else "it was interrupted"
        limit = outcome.clock.limit_s if outcome.clock is not None else limits.timeout_s
        return (
            Status.TIMEOUT,
            f"The code ran longer than the {limit:g} s time limit; {how}.",
        )
    if outcome.kernel_oom or container_oom:
        return Status.MEMORY, (
            f"The code ran out of memory (the limit is {limits.memory_mb} MB) "
            "and the kernel was stopped."
        )
    if outcome.status == "ok":
        return Status.OK, ""
    if outcome.status == "error":
        return Status.ERROR, "The code raised an exception."
    if outcome.status == "died":
        title = TITLES.get(outcome.language, outcome.language)
        return Status.KILLED, (
            f"The {title} kernel died {describe_exit(outcome.kernel_exit_code)} "
            "while running the code."
            + (
                f" Its variables are gone; the next {title} run starts a new kernel (the "
                "session and its files go on)."
                if outcome.language != "python"
                else ""
            )
        )
    return Status.KILLED, f"The sandbox stopped unexpectedly {describe_exit(container_exit)}."


def new_collector(limits: SandboxLimits) -> OutputCollector:
    return OutputCollector(
        text_limit=limits.output_bytes,
        rich_limit=limits.rich_output_bytes,
        rich_count_limit=limits.max_rich_results,
    )


def truncation_note(
    message: str, truncated: bool, limits: SandboxLimits, dropped_results: int = 0
) -> str:
    """The run's message, with a note when its output was cut or results were dropped."""
    if truncated:
        message = f"{message} Output was cut at {limits.output_bytes:,} bytes."
    if dropped_results:
        message = (
            f"{message} {dropped_results:,} more results not shown: at most "
            f"{limits.max_rich_results:,} are kept from one run."
        )
    return message.strip()


def describe_exit(code: int | None) -> str:
    if code is None:
        return "(no exit status)"
    signum = -code if code < 0 else code - 128 if code > 128 else 0
    if signum:
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        meaning = {
            "SIGSEGV": " (segmentation fault)",
            "SIGKILL": " (killed)",
            "SIGABRT": " (aborted)",
        }
        return f"from {name}{meaning.get(name, '')}"
    return f"with exit code {code}"


def unanswered_note(message: str, inputs: Sequence[InputExchange]) -> str:
    """The run's message, with a note for each `input()` nobody answered."""
    for asked in inputs:
        if not asked.answered:
            how = "getpass()" if asked.password else "input()"
            prompt = f" ({asked.prompt.strip()[:80]!r})" if asked.prompt.strip() else ""
            message = f"{message} Nobody answered the code's {how}{prompt}, so it raised EOFError."
    return message.strip()
