"""Cold gVisor sandboxes from a warmed template: one sandbox per image and container limits
is started once and warmed up (numpy, pandas and matplotlib imported, a first figure
drawn); every later sandbox is a clone restored from a checkpoint of it, instead of a kernel
started and warmed again.

The engine does all of it: `docker checkpoint create --leave-running` writes the template's
checkpoint straight into the new container's own checkpoint folder (the only place
`docker start --checkpoint` reads from: a custom folder is refused on start), and the clone
starts from it. Checkpoints of one template are taken one at a time.

A clone starts with the template's runner key and random generators: before it is handed
out it proves it holds the template's key (`resume`), then gets its own key and fresh
generators (`rekey` with `reseed`), so no two clones share a key, a number or a seed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import docker

from executor import docker_snapshots as snapshots
from executor.docker_sandbox import DockerSandbox
from executor.errors import ExecutorError, SnapshotFailed
from executor.limits import PRELOADABLE, SandboxLimits
from executor.run import wait_ready, wait_warm

log = logging.getLogger(__name__)

TEMPLATE_CHECKPOINT = "cellmate-template"
STOCK = 2
"""Primed clones kept per template (disk only: a checkpoint each, no memory)."""

Create = Callable[[SandboxLimits], Awaitable[DockerSandbox]]
"""Makes a sandbox's container (and its attached stream) without starting it."""
Start = Callable[[SandboxLimits], Awaitable[DockerSandbox]]


def template_limits(limits: SandboxLimits) -> SandboxLimits:
    """The limits of a template and its clones: the sandbox's, with the whole data stack
    preloaded (the clones pay for none of it)."""
    return dataclasses.replace(limits, preload=",".join(PRELOADABLE))


@dataclass(slots=True)
class Template:
    sandbox: DockerSandbox
    limits: SandboxLimits
    """The template's limits, which its clones are made with (the same container)."""
    create: Create
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held while the template is checkpointed: one checkpoint at a time."""
    primed: list[DockerSandbox] = field(default_factory=list)
    """Clones made but not started, each with the template's checkpoint in its folder:
    they hold no memory, and start by restoring it."""
    priming: asyncio.Task[None] | None = None


class Templates:
    """The warmed templates of one backend, by container limits; made on first use, each
    with a stock of primed clones."""

    def __init__(
        self, client: Callable[[], Awaitable[docker.DockerClient]], stock: int = STOCK
    ) -> None:
        self._client = client
        self.stock = stock
        self._templates: dict[tuple[object, ...], Template] = {}
        self._making: dict[tuple[object, ...], asyncio.Task[None]] = {}
        self._root: str | None = None
        self._closed = False
        self.refusal: str | None = None
        """Why clones are no longer made (the engine refused to checkpoint a template):
        sandboxes start cold instead."""

    def ready(self, limits: SandboxLimits) -> bool:
        """Whether the template for `limits` is warm (clones come from it)."""
        template = self._templates.get(template_limits(limits).container_spec())
        return template is not None and template.sandbox.alive

    async def warmed(self, limits: SandboxLimits) -> bool:
        """Wait for the template for `limits` being made (if it is), and whether it is warm
        and its stock of primed clones filled."""
        key = template_limits(limits).container_spec()
        making = self._making.get(key)
        if making is not None:
            await asyncio.wait([making])
        template = self._templates.get(key)
        if template is not None and template.priming is not None:
            await asyncio.wait([template.priming])
        return self.ready(limits)

    async def clone(
        self, limits: SandboxLimits, create: Create, start: Start
    ) -> DockerSandbox | None:
        """A clone of the template for `limits`, ready and warm; None while the template is
        being made (in the background, at the first call) or when cloning fails."""
        key = template_limits(limits).container_spec()
        template = self._templates.get(key)
        if self._closed or self.refusal is not None:
            return None
        if template is None or not template.sandbox.alive:
            self._templates.pop(key, None)
            if key not in self._making:
                self._making[key] = asyncio.create_task(self._make(key, limits, create, start))
            return None
        started = time.monotonic()
        try:
            if template.primed:
                sandbox = template.primed.pop(0)
            else:
                sandbox = await self._prime(template)
            self._restock(template)
            return await self._started(sandbox, template, started)
        except ExecutorError as exc:
            log.warning("could not clone the warmed template (a cold start instead): %s", exc)
            return None

    async def _make(
        self, key: tuple[object, ...], limits: SandboxLimits, create: Create, start: Start
    ) -> None:
        sandbox: DockerSandbox | None = None
        try:
            sandbox = await start(template_limits(limits))
            await wait_ready(sandbox, limits.startup_timeout_s)
            if not await wait_warm(sandbox):
                raise SnapshotFailed("the template stopped while it warmed up")
            template = self._templates[key] = Template(sandbox, template_limits(limits), create)
            log.info("warmed a template for cold gVisor sandboxes (%s)", sandbox.name)
            self._restock(template)
        except ExecutorError as exc:
            log.warning("could not make a warmed template: %s", exc)
            if sandbox is not None:
                await sandbox.destroy()
        finally:
            self._making.pop(key, None)

    def _restock(self, template: Template) -> None:
        if template.priming is None or template.priming.done():
            template.priming = asyncio.create_task(self._fill(template))

    async def _fill(self, template: Template) -> None:
        while len(template.primed) < self.stock and template.sandbox.alive:
            try:
                template.primed.append(await self._prime(template))
            except ExecutorError as exc:
                if not self._closed:
                    # An engine that refuses once refuses again: sandboxes start cold.
                    self.refusal = str(exc)
                    log.warning("cold sandboxes start without the warmed template: %s", exc)
                return

    async def _prime(self, template: Template) -> DockerSandbox:
        """A clone's container, made and given a checkpoint of the template (not started)."""
        client = await self._client()
        sandbox = await template.create(template.limits)
        try:
            root = await self._engine_root(client)
            # The engine writes it straight into the clone's own checkpoint folder.
            folder = f"{root}/containers/{sandbox.id}/checkpoints"
            async with template.lock:
                await asyncio.to_thread(
                    snapshots.create_checkpoint,
                    client,
                    template.sandbox.name,
                    TEMPLATE_CHECKPOINT,
                    stop=False,
                    folder=folder,
                )
        except BaseException:
            await asyncio.shield(sandbox.destroy())
            raise
        return sandbox

    async def _started(
        self, sandbox: DockerSandbox, template: Template, started: float
    ) -> DockerSandbox:
        """A primed clone started from its checkpoint, proven to be the template's, and given
        its own key and random generators."""
        client = await self._client()
        try:
            await asyncio.to_thread(
                snapshots.start_from_checkpoint, client, sandbox.name, TEMPLATE_CHECKPOINT
            )
            await asyncio.to_thread(
                snapshots.remove_checkpoint, client, sandbox.name, TEMPLATE_CHECKPOINT
            )
            own = sandbox.key  # derived for its container, as every sandbox's is
            sandbox.rekey_from(template.sandbox.key)
            await snapshots.handshake(sandbox, "", reseed=True, new_key=own)
        except BaseException:
            await asyncio.shield(sandbox.destroy())
            raise
        sandbox.replay_start(round((time.monotonic() - started) * 1000))
        return sandbox

    async def _engine_root(self, client: docker.DockerClient) -> str:
        if self._root is None:
            info: dict[str, Any] = await asyncio.to_thread(client.info)
            self._root = str(info.get("DockerRootDir") or "/var/lib/docker")
        return self._root

    async def close(self) -> None:
        self._closed = True
        for task in list(self._making.values()):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, ExecutorError):
                await task
        for template in list(self._templates.values()):
            if template.priming is not None:
                template.priming.cancel()
                with contextlib.suppress(asyncio.CancelledError, ExecutorError):
                    await template.priming
            for sandbox in [*template.primed, template.sandbox]:
                with contextlib.suppress(ExecutorError):
                    await sandbox.destroy()
        self._templates.clear()
