"""Kernels for languages other than Python (wire `Run.language`): R, JavaScript, TypeScript
and Bash, each its own Jupyter kernel in the same sandbox and /mnt/data, started on its
first run (a Python-only session never pays for them) and resting stopped between runs, as
the Python kernel does."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
from jupyter_client.kernelspec import KernelSpecManager

from executor import wire
from runner.client import CappedClient, DeepQueueKernelClient
from runner.files import DATA_DIR, snapshot
from runner.kernel_scripts import IOPUB_GRACE_S
from runner.kernels import error_output, kernel_process, run_done, scoped_cells, start_caps
from runner.stdin import Secrets
from runner.system import processes, stopped

KERNEL_START_S = 120
"""A kernel's start on a loaded machine, after another was killed for memory, can take
much longer than its usual seconds."""
SETUP = {
    # ggplot2's charts as data beside their pictures (runner/charts.R). A failure there
    # leaves R's plots as pictures only, and the kernel started.
    "r": f"try(source({json.dumps(str(Path(__file__).with_name('charts.R')))}, "
    "local = new.env()), silent = TRUE); invisible(NULL)",
}
"""What each language's kernel runs, silently, once it has started."""
NAMES = {
    "r": "R",
    "javascript": "JavaScript",
    "typescript": "TypeScript",
    "bash": "Bash",
}


def available_languages() -> tuple[str, ...]:
    """The languages this image has a kernel for (kernelspecs named as the languages)."""
    try:
        specs = KernelSpecManager().find_kernel_specs()
    except Exception:
        specs = {}
    return ("python", *(name for name in wire.LANGUAGES[1:] if name in specs))


def descendants(pid: int) -> set[int]:
    """The process and every process under it."""
    children: dict[int, list[int]] = {}
    for child, _, parent in processes():
        children.setdefault(parent, []).append(child)
    found, todo = {pid}, [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


class LanguageKernel:
    """One language's kernel. Its own processes (the kernel, and what it started to work:
    Bash's shell) are recorded once it answers, and are the only ones of its that outlive
    a run; they rest stopped (SIGSTOP) between runs."""

    def __init__(self, language: str, emit: Callable[[wire.Event], None], secrets: Secrets):
        self.language = language
        self.emit = emit
        self.secrets = secrets
        self.nb = _notebook(language)
        self.client = _client(self.nb, language, emit, secrets)
        self.started = False
        self.frozen = False
        self.own: set[int] = set()

    def pid(self) -> int | None:
        pid = getattr(kernel_process(self.client), "pid", None)
        return pid if isinstance(pid, int) else None

    async def start(self) -> None:
        self.client.km = self.client.create_kernel_manager()
        self.client.km.client_factory = DeepQueueKernelClient
        await asyncio.wait_for(
            self.client.async_start_new_kernel(cwd=str(DATA_DIR)), KERNEL_START_S
        )
        await asyncio.wait_for(self.client.async_start_new_kernel_client(), KERNEL_START_S)
        setup = SETUP.get(self.language)
        if setup is not None:
            with contextlib.suppress(Exception):
                await self.client.kc.execute_interactive(
                    setup,
                    silent=True,
                    store_history=False,
                    timeout=KERNEL_START_S,
                    output_hook=lambda _: None,
                )
        self.started = True
        pid = self.pid()
        self.own = descendants(pid) if pid is not None else set()

    async def run(self, request: wire.Run, rest: bool = True) -> wire.Done:
        """Run the request's cells (starting the kernel on the first run); its `Done`."""
        if not self.started:
            try:
                await self.start()
            except Exception as exc:
                await self.shutdown()
                return self._failed(
                    request,
                    "KernelStartFailed",
                    f"{NAMES[self.language]} kernel did not start: {type(exc).__name__}: {exc}"[
                        :500
                    ],
                )
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

    async def quietly(self, code: str, timeout_s: float) -> None:
        """Run the runner's own code in the kernel (starting it if need be), with nothing
        recorded in the session's notebook; RuntimeError when the code fails."""
        if not self.started:
            try:
                await self.start()
            except Exception:
                await self.shutdown()
                raise
        self.thaw()
        try:
            reply = await self.client.kc.execute_interactive(
                code,
                silent=True,
                store_history=False,
                timeout=timeout_s,
                output_hook=lambda message: None,
            )
        finally:
            await self.rest()
        content = reply.get("content", {}) if isinstance(reply, dict) else {}
        if content.get("status") != "ok":
            raise RuntimeError(f"{content.get('ename', 'error')}: {content.get('evalue', '')}")

    def _failed(self, request: wire.Run, name: str, value: str) -> wire.Done:
        self.emit(error_output(request.id, name, value))
        return wire.Done(id=request.id, status="error")

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
        self.nb = _notebook(self.language)
        self.client = _client(self.nb, self.language, self.emit, self.secrets)


def unavailable(run_id: str, language: str, have: tuple[str, ...]) -> list[wire.Event]:
    """What a run in a language this image lacks gets: an error, and its end."""
    value = (
        f"This sandbox has no {NAMES.get(language, language)} kernel "
        f"(its languages: {', '.join(have)})."
    )
    return [
        error_output(run_id, "LanguageUnavailable", value),
        wire.Done(id=run_id, status="error"),
    ]


def _notebook(language: str) -> Any:
    nb = nbformat.v4.new_notebook()  # type: ignore[no-untyped-call]
    nb.metadata["kernelspec"] = {
        "name": language,
        "display_name": NAMES.get(language, language),
        "language": language,
    }
    return nb


def _client(
    nb: Any, language: str, emit: Callable[[wire.Event], None], secrets: Secrets
) -> CappedClient:
    return CappedClient(
        nb,
        emit,
        secrets,
        timeout=None,
        allow_errors=False,
        kernel_name=language,
        record_timing=True,
        iopub_timeout=IOPUB_GRACE_S,
        shutdown_kernel="immediate",
    )
