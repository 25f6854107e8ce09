"""Kernels for languages other than Python (wire `Run.language`): R, JavaScript, TypeScript
and Bash, each its own Jupyter kernel in the same sandbox and /mnt/data, started on its
first run (a Python-only session never pays for them) and resting stopped between runs, as
the Python kernel does."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
from jupyter_client.kernelspec import KernelSpecManager

from executor import wire
from runner.client import CappedClient, DeepQueueKernelClient
from runner.files import DATA_DIR
from runner.kernel_scripts import IOPUB_GRACE_S
from runner.kernels import SideKernel, error_output
from runner.stdin import Secrets

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


class LanguageKernel(SideKernel):
    """One language's kernel, set up by `SETUP` once it has started."""

    def __init__(self, language: str, emit: Callable[[wire.Event], None], secrets: Secrets):
        self.language = language
        super().__init__(emit, secrets)

    def new_notebook(self) -> Any:
        return _notebook(self.language)

    def new_client(self) -> CappedClient:
        return _client(self.nb, self.language, self.emit, self.secrets)

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

    async def run(self, request: wire.Run, rest: bool = True) -> wire.Done:
        """As `SideKernel.run`; a kernel that does not start is an error result."""
        try:
            await self.ensure_started()
        except Exception as exc:
            await self.shutdown()
            why = f"{type(exc).__name__}: {exc}"
            self.emit(
                error_output(
                    request.id,
                    "KernelStartFailed",
                    f"{NAMES[self.language]} kernel did not start: {why}"[:500],
                )
            )
            return wire.Done(id=request.id, status="error")
        return await super().run(request, rest)

    async def quietly(self, code: str, timeout_s: float) -> None:
        """Run the runner's own code in the kernel (starting it if need be), with nothing
        recorded in the session's notebook; RuntimeError when the code fails."""
        try:
            await self.ensure_started()
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
