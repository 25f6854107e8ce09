"""Notebook mode: cells run once in a fresh sandbox, which is destroyed afterwards."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from executor.archive import OutputCaps, build_input_tar
from executor.errors import SandboxError
from executor.limits import SandboxLimits
from executor.models import ExecutionResult, OutputCollector, SkippedFile, Status
from executor.protocol import Sandbox, SandboxBackend

MB = 1_000_000


@dataclass(slots=True)
class RunOutcome:
    """What the runner said (or failed to say) about one run."""

    status: str = "lost"
    """ok, error, died (kernel), lost (sandbox output ended), timeout."""
    notebook: Mapping[str, Any] | None = None
    truncated: bool = False
    kernel_exit_code: int | None = None
    kernel_oom: bool = False
    timed_out: bool = False
    killed_by_host: bool = False


async def run_notebook(
    backend: SandboxBackend,
    cells: Sequence[str],
    limits: SandboxLimits,
    files: Mapping[str, bytes] | None = None,
) -> ExecutionResult:
    files = dict(files or {})
    input_tar = build_input_tar(files, limits.max_input_files, limits.max_input_total_mb * MB)
    started = time.monotonic()
    sandbox = await backend.start(limits, input_tar or None)
    try:
        startup_ms = await _wait_ready(sandbox, limits)
        run_started = time.monotonic()
        collector = OutputCollector(
            text_limit=limits.output_bytes, rich_limit=limits.rich_output_bytes
        )
        outcome = await _run(sandbox, list(cells), limits, collector)
        duration_ms = round((time.monotonic() - run_started) * 1000)
        exit_state = await sandbox.exit_state()
        extracted = await sandbox.get_files(_output_caps(limits), files)
        status, message = _judge(outcome, exit_state.oom_killed, exit_state.exit_code, limits)
        outcome.truncated = outcome.truncated or collector.truncated
        if outcome.truncated:
            message = _join(message, f"Output was cut at {limits.output_bytes:,} bytes.")
        skipped = list(extracted.skipped)
        if extracted.over_count:
            skipped.append(
                SkippedFile(
                    path="…",
                    reason=f"{extracted.over_count:,} more files not returned: at most "
                    f"{limits.max_output_files} output files come back from one run",
                )
            )
        if extracted.not_listed:
            skipped.append(
                SkippedFile(path="…", reason=f"{extracted.not_listed:,} more entries refused")
            )
        return ExecutionResult(
            status=status,
            stdout="".join(collector.stdout),
            stderr="".join(collector.stderr),
            results=tuple(collector.results),
            error=collector.error,
            message=message,
            files=tuple(extracted.files),
            skipped_files=tuple(skipped),
            notebook=outcome.notebook,
            output_truncated=outcome.truncated,
            duration_ms=duration_ms,
            startup_ms=startup_ms or round((run_started - started) * 1000),
            runtime=limits.runtime,
        )
    finally:
        await sandbox.destroy()


async def _wait_ready(sandbox: Sandbox, limits: SandboxLimits) -> int:
    try:
        async with asyncio.timeout(limits.startup_timeout_s):
            while True:
                event = await sandbox.receive()
                if event is None:
                    tail = getattr(sandbox, "stderr_tail", "")
                    raise SandboxError(
                        f"the sandbox exited before its kernel was ready. {tail[-2000:]}".strip()
                    )
                if event.get("type") == "ready":
                    return int(event.get("startup_ms") or 0)
    except TimeoutError:
        raise SandboxError(
            f"the sandbox's kernel was not ready within {limits.startup_timeout_s:.0f} s"
        ) from None


async def _run(
    sandbox: Sandbox, cells: list[str], limits: SandboxLimits, collector: OutputCollector
) -> RunOutcome:
    outcome = RunOutcome()
    await sandbox.send({"op": "run", "cells": cells})
    try:
        async with asyncio.timeout(limits.timeout_s):
            await _collect(sandbox, collector, outcome)
        return outcome
    except TimeoutError:
        outcome.timed_out = True
    # Interrupt first, so the notebook keeps what ran; kill when the code ignores it.
    with contextlib.suppress(SandboxError):
        await sandbox.send({"op": "interrupt"})
    try:
        async with asyncio.timeout(limits.interrupt_grace_s):
            await _collect(sandbox, collector, outcome)
    except TimeoutError:
        outcome.killed_by_host = True
        await sandbox.kill()
    return outcome


async def _collect(sandbox: Sandbox, collector: OutputCollector, outcome: RunOutcome) -> None:
    while True:
        event = await sandbox.receive()
        if event is None:
            outcome.status = "lost"
            return
        kind = event.get("type")
        if kind == "output" and isinstance(event.get("output"), Mapping):
            collector.add(event["output"])
        elif kind == "done":
            outcome.status = str(event.get("status"))
            notebook = event.get("notebook")
            outcome.notebook = notebook if isinstance(notebook, Mapping) else None
            outcome.truncated = bool(event.get("truncated"))
            code = event.get("exit_code")
            outcome.kernel_exit_code = code if isinstance(code, int) else None
            outcome.kernel_oom = bool(event.get("oom"))
            return


def _judge(
    outcome: RunOutcome, container_oom: bool, container_exit: int | None, limits: SandboxLimits
) -> tuple[Status, str]:
    if outcome.timed_out:
        how = "it was stopped" if outcome.killed_by_host else "it was interrupted"
        return (
            Status.TIMEOUT,
            f"The code ran longer than the {limits.timeout_s:g} s time limit; {how}.",
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
        return (
            Status.KILLED,
            "The Python kernel died "
            f"{_describe_exit(outcome.kernel_exit_code)} while running the code.",
        )
    return Status.KILLED, f"The sandbox stopped unexpectedly {_describe_exit(container_exit)}."


def _describe_exit(code: int | None) -> str:
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


def _output_caps(limits: SandboxLimits) -> OutputCaps:
    return OutputCaps(
        max_files=limits.max_output_files,
        max_file_bytes=limits.max_output_file_mb * MB,
        max_total_bytes=limits.max_output_total_mb * MB,
        max_depth=limits.max_output_depth,
    )


def _join(first: str, second: str) -> str:
    return f"{first} {second}".strip()
