"""The executor: the one object callers hold to run code in sandboxes."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Self

from executor.docker_backend import DockerBackend
from executor.limits import SandboxLimits
from executor.models import ExecutionResult
from executor.notebook import run_notebook
from executor.protocol import SandboxBackend

log = logging.getLogger(__name__)


class Executor:
    """Checks the engine and image on entry, removes leftovers of crashed runs, runs code."""

    def __init__(
        self,
        image: str,
        limits: SandboxLimits | None = None,
        backend: SandboxBackend | None = None,
        instance: str = "default",
    ) -> None:
        self.limits = limits or SandboxLimits()
        self.backend: SandboxBackend = backend or DockerBackend(image, instance=instance)

    async def __aenter__(self) -> Self:
        try:
            await self.backend.check(self.limits.runtime)
            removed = await self.backend.remove_leftovers()
            if removed:
                log.warning("removed %d sandbox(es) left behind by an earlier run", removed)
        except BaseException:
            await self.backend.close()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.backend.close()

    async def run_notebook(
        self,
        cells: str | Sequence[str],
        files: Mapping[str, bytes] | None = None,
        **overrides: Any,
    ) -> ExecutionResult:
        """Run cells in order in a fresh sandbox (stopping at the first error), then destroy it.

        `overrides` replace fields of the executor's limits for this run (`timeout_s=10`).
        """
        limits = dataclasses.replace(self.limits, **overrides) if overrides else self.limits
        if limits.runtime != self.limits.runtime:
            await self.backend.check(limits.runtime)
        return await run_notebook(
            self.backend, [cells] if isinstance(cells, str) else list(cells), limits, files
        )
