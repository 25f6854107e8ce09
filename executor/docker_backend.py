"""Sandboxes as hardened Docker containers, driven through the Engine API.

The runner inside is reached through the container's attached stdin/stdout (works under
runc and gVisor, with a remote engine, and from inside a container); files move as tar
streams through the archive calls. /mnt/data is a size-capped tmpfs volume owned by the
container, so archive calls work on a read-only root and under gVisor alike.

The host chooses each sandbox's key and writes it to the runner's stdin (`hello`) before
any user code exists; the sandbox's stdout, the protocol stream, is never stored (log driver
`none`), so neither the key nor anything a user's code prints stays on the engine's disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

import docker
import docker.errors
import requests
from docker.models.containers import Container

from executor.archive import ChunkReader, ExtractedFiles, OutputCaps, read_output_tar
from executor.backoff import Backoff
from executor.docker_specs import (
    DATA_DIR,
    INSTANCE_LABEL,
    SANDBOX_LABEL,
    VolumeReplaced,
    check_volume,
    remove_plain_volumes,
    sandbox_specs,
)
from executor.errors import EngineUnavailable, FreezeFailed, ImageNotFound, SandboxError
from executor.limits import SandboxLimits
from executor.protocol import ExitState
from executor.stdio import RunnerStream

log = logging.getLogger(__name__)
T = TypeVar("T")

FREEZE_RETRY = Backoff(attempts=6, first_s=0.05, factor=2.0, max_s=1.0)
"""A freeze that the runtime refuses (runc under load: `unable to freeze`) is tried again
after 0.05, 0.1, 0.2, 0.4 and 0.8 s."""
UNREAD_BYTES = 64 * 1024
"""Half of what an attach stream buffers before the engine's output waits for a reader."""
START_ATTEMPTS = 3
"""Starts tried when a sandbox's volume went away before its container was made."""


def connect(timeout: float = 120) -> docker.DockerClient:
    """A client for the engine in DOCKER_HOST (or the local socket), or EngineUnavailable."""
    try:
        client = docker.from_env(timeout=int(timeout))
        client.ping()
    except docker.errors.DockerException as exc:
        raise EngineUnavailable(
            "No Docker engine answers "
            f"({os.environ.get('DOCKER_HOST') or 'unix:///var/run/docker.sock'}): {exc}. "
            "Start Docker, or run scripts/ensure-docker.sh to install and start one."
        ) from exc
    return client


class RuntimeMissing(SandboxError):
    """The engine has no runtime registered under the name the sandbox limits ask for."""

    def __init__(self, runtime: str, registered: Collection[str]) -> None:
        self.runtime = runtime
        self.registered = list(registered)
        super().__init__(
            f"The Docker engine has no runtime {runtime!r} "
            f"(it has: {', '.join(self.registered)}). "
            "Install gVisor and register it as 'runsc' (scripts/ensure-docker.sh does), "
            "or set CELLMATE_SANDBOX_RUNTIME=runc."
        )


def check_runtime(info: Mapping[str, Any], runtime: str) -> None:
    """Raise RuntimeMissing unless the engine (its `info`) has `runtime` registered."""
    registered = info.get("Runtimes", {})
    if runtime not in registered:
        raise RuntimeMissing(runtime, registered)


class DockerSandbox:
    def __init__(
        self,
        client: docker.DockerClient,
        container: Container,
        volume_name: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        key: bytes,
    ) -> None:
        self._client = client
        self._container = container
        self._volume_name = volume_name
        self._events = RunnerStream(reader, key=key)
        self._writer = writer
        self._destroyed = False
        self._frozen = False

    @property
    def id(self) -> str:
        return str(self._container.id)

    @property
    def alive(self) -> bool:
        return not self._events.ended

    @property
    def stderr_tail(self) -> str:
        return self._events.stderr_tail

    async def hello(self) -> None:
        """The runner's first line, with its key: written before any user code exists."""
        await self._write(self._events.hello_line())

    async def send(self, request: Mapping[str, Any]) -> None:
        await self._write(self._events.request_line(request))

    async def _write(self, line: bytes) -> None:
        try:
            self._writer.write(line)
            await self._writer.drain()
        except (ConnectionError, OSError) as exc:
            raise SandboxError(f"the sandbox stopped accepting requests: {exc}") from exc

    async def receive(self) -> dict[str, Any] | None:
        return await self._events.receive()

    async def put_files(self, tar: bytes) -> None:
        # Frozen too: the engine writes as root, and must not meet a link that code swapped
        # in for a file name halfway.
        def put() -> None:
            thaw = self._freeze("write files into it")
            try:
                self._container.put_archive(DATA_DIR, tar)
            except docker.errors.APIError as exc:
                raise SandboxError(
                    f"could not put files into the sandbox: {exc.explanation or exc}"
                ) from exc
            finally:
                if thaw:
                    self._thaw()

        await _engine(put)

    async def get_files(
        self,
        caps: OutputCaps,
        unchanged: Mapping[str, bytes] | None = None,
        wanted: Collection[str] | None = None,
    ) -> ExtractedFiles:
        # One archive of the whole folder, taken while every process in the sandbox is
        # frozen: the engine resolves only /mnt/data itself (a mount point), and nothing can
        # swap a folder for a link while it walks the tree. Links inside come back as links,
        # and are refused.
        def fetch() -> ExtractedFiles:
            thaw = self._freeze("read its files")
            try:
                chunks, _ = self._container.get_archive(DATA_DIR)
                return read_output_tar(ChunkReader(iter(chunks)), caps, unchanged, wanted)
            except docker.errors.NotFound:
                return ExtractedFiles()
            finally:
                if thaw:
                    self._thaw()

        return await _engine(fetch)

    def _freeze(self, doing: str) -> bool:
        """Pause the sandbox unless it is already still; True when it must be thawed after.

        The engine reads and writes /mnt/data as root; frozen, no code in the sandbox can
        swap a folder for a link while it does. A runtime that cannot freeze (runc under
        load) is asked again a few times; then this one operation is refused (FreezeFailed)
        rather than done unfrozen, and the session goes on untouched: ending its processes
        instead would lose the user's variables for a failure that a moment later is gone.
        """
        if self._frozen:
            return False
        refused: docker.errors.APIError | None = None
        for wait in FREEZE_RETRY.waits():
            if wait:
                _wait(wait)
            try:
                self._container.pause()
            except docker.errors.NotFound:
                return False
            except docker.errors.APIError as exc:
                refused = exc
                self._container.reload()
                state = self._container.attrs.get("State", {})
                if not state.get("Running") or state.get("Paused"):
                    return False  # stopped, or already frozen (by kill)
                log.info("the engine could not freeze sandbox %s: %s", self.id[:12], exc)
                continue
            return True
        said = (refused.explanation if refused is not None else None) or refused
        tries = f"{FREEZE_RETRY.attempts} tries in {FREEZE_RETRY.total_s:.1f} s"
        raise FreezeFailed(
            f"the sandbox was too busy to {doing}: the engine could not freeze it "
            f"({tries}; {said}). Nothing was changed, and the session goes on; try again."
        )

    def _thaw(self) -> None:
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
            self._container.unpause()

    async def exit_state(self) -> ExitState:
        def inspect() -> ExitState:
            try:
                self._container.reload()
            except docker.errors.NotFound:
                return ExitState(running=False, exit_code=None, oom_killed=False)
            state = self._container.attrs.get("State", {})
            return ExitState(
                running=bool(state.get("Running")),
                exit_code=state.get("ExitCode"),
                oom_killed=bool(state.get("OOMKilled")),
            )

        return await _engine(inspect)

    async def kill(self) -> None:
        # Freezing stops every process at once, like a kill, but keeps the container running,
        # and with it the tmpfs volume that holds /mnt/data, so its files can still be read.
        def kill() -> None:
            try:
                self._container.pause()
                self._frozen = True
            except docker.errors.APIError:
                with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                    self._container.kill()

        await _engine(kill)

    async def destroy(self) -> None:
        """Remove the container and its volume; raises EngineUnavailable (and may be called
        again) when the engine does not answer."""
        if self._destroyed:
            return
        self._writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self._writer.wait_closed()
        # A thread finishes the removal even when the awaiting task is cancelled.
        await _engine(_remove, self._client, self.id, self._volume_name)
        self._destroyed = True

    @property
    def volume_name(self) -> str:
        return self._volume_name


def _wait(seconds: float) -> None:
    """A wait between attempts (in an engine call's own thread)."""
    time.sleep(seconds)


async def _engine(call: Callable[..., T], *args: Any) -> T:
    """Run a blocking Engine API call in a thread; an engine that stops answering (it is
    restarting, or gone) becomes EngineUnavailable, with what happened."""
    try:
        return await asyncio.to_thread(call, *args)
    except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as exc:
        raise EngineUnavailable(f"the Docker engine stopped answering: {exc}") from exc
    except docker.errors.APIError as exc:
        if (
            exc.status_code is not None
            and exc.status_code >= 500
            and "is restarting" not in str(exc)
        ):
            raise SandboxError(
                f"the Docker engine failed a request: {exc.explanation or exc}"
            ) from exc
        raise


def _going(exc: docker.errors.APIError) -> bool:
    """Whether the engine says the container is gone, or already being removed (by another
    call: a sweep of the same instance's labels, say)."""
    return exc.status_code == 404 or (exc.status_code == 409 and "already in progress" in str(exc))


def _remove(client: docker.DockerClient, container_id: str, volume_name: str) -> None:
    try:
        client.api.remove_container(container_id, force=True, v=True)
    except docker.errors.APIError as exc:
        if not _going(exc):
            # gVisor cannot kill a frozen sandbox: thaw it, then remove it.
            with contextlib.suppress(docker.errors.APIError):
                client.api.unpause(container_id)
            try:
                client.api.remove_container(container_id, force=True, v=True)
            except docker.errors.APIError as again:
                if not _going(again):
                    raise
    with contextlib.suppress(docker.errors.NotFound):
        client.api.remove_volume(volume_name, force=True)


async def _abandon(
    client: docker.DockerClient,
    name: str,
    creating: asyncio.Future[tuple[Container, socket.socket]],
) -> None:
    """Remove what a start that failed or was cancelled made, once its thread is done."""
    await asyncio.wait({creating})
    if not creating.cancelled() and creating.exception() is None:
        creating.result()[1].close()
    try:
        await asyncio.to_thread(_remove, client, name, name)
    except Exception as exc:  # the engine is away: the next sweep removes it by its labels
        log.warning("could not remove the sandbox %s that did not start: %s", name, exc)


class DockerBackend:
    """Starts sandboxes from `image` on the engine that DOCKER_HOST names."""

    def __init__(self, image: str, instance: str = "default") -> None:
        self.image = image
        self.instance = instance
        self._client: docker.DockerClient | None = None

    @property
    def labels(self) -> dict[str, str]:
        return {SANDBOX_LABEL: "1", INSTANCE_LABEL: self.instance}

    async def client(self) -> docker.DockerClient:
        if self._client is None:
            self._client = await asyncio.to_thread(connect)
        return self._client

    async def check(self, runtime: str = "runc") -> None:
        client = await self.client()

        def inspect() -> None:
            try:
                client.images.get(self.image)
            except docker.errors.ImageNotFound as exc:
                raise ImageNotFound(
                    f"The sandbox image {self.image} is not built. Run `cellmate build-image`."
                ) from exc
            check_runtime(client.info(), runtime)

        await asyncio.to_thread(inspect)

    async def start(self, limits: SandboxLimits, input_tar: bytes | None) -> DockerSandbox:
        client = await self.client()
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                return await self._start(client, limits, input_tar)
            except VolumeReplaced as exc:
                if attempt == START_ATTEMPTS:
                    raise
                log.warning("%s; starting another sandbox", exc)
        raise AssertionError("unreachable")

    async def _start(
        self, client: docker.DockerClient, limits: SandboxLimits, input_tar: bytes | None
    ) -> DockerSandbox:
        name = f"cellmate-{uuid.uuid4().hex[:16]}"
        # The thread goes on making the container when the caller is cancelled (a pool that
        # closes): the clean-up waits for it, so nothing it makes afterwards is left behind.
        creating = asyncio.ensure_future(asyncio.to_thread(self._create, client, name, limits))
        try:
            container, raw = await asyncio.shield(creating)
        except BaseException:
            await asyncio.shield(_abandon(client, name, creating))
            raise
        try:
            # Frames are read with readexactly, which ignores the limit; the limit only sets
            # how much the stream buffers unread (twice it) before it stops reading the
            # socket, so between runs a sandbox cannot make the bot hold more than that.
            reader, writer = await asyncio.open_connection(sock=raw, limit=UNREAD_BYTES)
            sandbox = DockerSandbox(client, container, name, reader, writer, os.urandom(32))
            await asyncio.to_thread(container.start)
            await sandbox.hello()
            # A tmpfs volume only holds data while it is mounted, that is while the container
            # runs; so files go in after the start (the runner needs none to get ready). No
            # user code exists yet, so this needs no freeze.
            if input_tar:
                await asyncio.to_thread(container.put_archive, DATA_DIR, input_tar)
        except BaseException:
            raw.close()
            await asyncio.shield(asyncio.to_thread(_remove, client, name, name))
            raise
        return sandbox

    def _create(
        self, client: docker.DockerClient, name: str, limits: SandboxLimits
    ) -> tuple[Container, socket.socket]:
        volume, container_args = sandbox_specs(self.image, name, limits, self.labels)
        client.volumes.create(**volume)
        try:
            container = client.containers.create(**container_args)
        except docker.errors.ImageNotFound as exc:
            raise ImageNotFound(
                f"The sandbox image {self.image} is not built. Run `cellmate build-image`."
            ) from exc
        except docker.errors.APIError as exc:
            raise SandboxError(
                f"the Docker engine refused to create a sandbox: {exc.explanation or exc}"
            ) from exc
        check_volume(client, volume)
        attached = client.api.attach_socket(
            name, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
        )
        # A private duplicate of the descriptor, so that the HTTP library's own clean-up of the
        # upgraded connection cannot close it under us.
        original: socket.socket = getattr(attached, "_sock", attached)
        raw = socket.socket(fileno=os.dup(original.fileno()))
        with contextlib.suppress(OSError):
            attached.close()
            original.close()
        return container, raw

    async def remove_leftovers(self, keep: Collection[str] = ()) -> int:
        client = await self.client()

        def sweep() -> int:
            selector = [f"{k}={v}" for k, v in self.labels.items()]
            containers = client.containers.list(all=True, filters={"label": selector})
            for container in containers:
                try:
                    container.remove(force=True, v=True)
                except docker.errors.APIError as exc:
                    if not _going(exc):
                        raise
            for volume in client.volumes.list(filters={"label": selector}):
                with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                    volume.remove(force=True)
            remove_plain_volumes(client)
            return len(containers)

        return await asyncio.to_thread(sweep)

    async def close(self) -> None:
        if self._client is not None:
            await asyncio.to_thread(self._client.close)
            self._client = None
