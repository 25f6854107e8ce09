"""Sandboxes as hardened Docker containers, driven through the Engine API.

The runner inside is reached through the container's attached stdin/stdout (works under
runc and gVisor, with a remote engine, and from inside a container); files move as tar
streams through the archive calls. /mnt/data is a size-capped tmpfs volume owned by the
container, so archive calls work on a read-only root and under gVisor alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

import docker
import docker.errors
import requests
from docker.models.containers import Container
from docker.types import LogConfig, Mount, Ulimit

from executor.archive import ChunkReader, ExtractedFiles, OutputCaps, read_output_tar
from executor.errors import EngineUnavailable, ImageNotFound, SandboxError
from executor.limits import SandboxLimits
from executor.protocol import ExitState
from executor.stdio import MAX_LINE_BYTES, RunnerStream

log = logging.getLogger(__name__)
T = TypeVar("T")

SANDBOX_LABEL = "cellmate.sandbox"
INSTANCE_LABEL = "cellmate.instance"
DATA_DIR = "/mnt/data"


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


class DockerSandbox:
    def __init__(
        self,
        client: docker.DockerClient,
        container: Container,
        volume_name: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self._client = client
        self._container = container
        self._volume_name = volume_name
        self._events = RunnerStream(reader)
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

    async def send(self, request: Mapping[str, Any]) -> None:
        try:
            self._writer.write(self._events.request_line(request))
            await self._writer.drain()
        except (ConnectionError, OSError) as exc:
            raise SandboxError(f"the sandbox stopped accepting requests: {exc}") from exc

    async def receive(self) -> dict[str, Any] | None:
        return await self._events.receive()

    async def put_files(self, tar: bytes) -> None:
        # Frozen too: the engine writes as root, and must not meet a link that code swapped
        # in for a file name halfway.
        def put() -> None:
            thaw = self._freeze()
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
            thaw = self._freeze()
            try:
                chunks, _ = self._container.get_archive(DATA_DIR)
                return read_output_tar(ChunkReader(iter(chunks)), caps, unchanged, wanted)
            except docker.errors.NotFound:
                return ExtractedFiles()
            finally:
                if thaw:
                    self._thaw()

        return await _engine(fetch)

    def _freeze(self) -> bool:
        """Pause the sandbox unless it is already still; True when it must be thawed after."""
        if self._frozen:
            return False
        try:
            self._container.pause()
        except docker.errors.NotFound:
            return False
        except docker.errors.APIError as exc:
            self._container.reload()
            state = self._container.attrs.get("State", {})
            if state.get("Running") and not state.get("Paused"):
                raise SandboxError(
                    f"could not freeze the sandbox to read its files: {exc.explanation or exc}"
                ) from exc
            return False
        return True

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


def sandbox_specs(
    image: str, name: str, limits: SandboxLimits, labels: Mapping[str, str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The arguments of `volumes.create` and `containers.create` for one sandbox: everything
    the engine is asked for, in one place (the Docker API proxy's tests start from these)."""
    volume: dict[str, Any] = {
        "name": name,
        "driver": "local",
        "driver_opts": {
            "type": "tmpfs",
            "device": "tmpfs",
            "o": (
                f"size={limits.data_mb}m,uid={limits.uid},gid={limits.gid},mode=0700,nosuid,nodev"
            ),
        },
        "labels": dict(labels),
    }
    threads = str(max(1, int(limits.cpus)))
    container: dict[str, Any] = {
        "image": image,
        "name": name,
        "hostname": "sandbox",
        "labels": dict(labels),
        "user": f"{limits.uid}:{limits.gid}",
        "working_dir": DATA_DIR,
        "stdin_open": True,
        "tty": False,
        # The runner is the sandbox's init: an init of its own would hold the event stream's
        # descriptors where the user's code, running as the same user, could write to them.
        "init": False,
        "runtime": limits.runtime,
        # Only these variables exist inside; nothing of the bot's environment.
        "environment": {
            "OMP_NUM_THREADS": threads,
            "OPENBLAS_NUM_THREADS": threads,
            "MKL_NUM_THREADS": threads,
            "CELLMATE_PRELOAD": ",".join(limits.preloaded()),
        },
        "network_mode": "bridge" if limits.network else "none",
        "read_only": True,
        # Scratch space inside the container only; never a host path.
        "tmpfs": {"/tmp": f"rw,nosuid,nodev,noexec,size={limits.tmp_mb}m,mode=1777"},  # noqa: S108
        "mounts": [Mount(target=DATA_DIR, source=name, type="volume")],
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "mem_limit": f"{limits.memory_mb}m",
        "memswap_limit": f"{limits.memory_mb}m",
        "nano_cpus": int(limits.cpus * 1e9),
        "pids_limit": limits.pids,
        "ulimits": [
            Ulimit(
                name="fsize",
                soft=limits.file_size_mb * 1024 * 1024,
                hard=limits.file_size_mb * 1024 * 1024,
            ),
            Ulimit(name="nofile", soft=limits.open_files, hard=limits.open_files),
            Ulimit(name="core", soft=0, hard=0),
        ],
        "log_config": LogConfig(
            type="json-file", config={"max-size": f"{limits.log_mb}m", "max-file": "1"}
        ),
        "shm_size": "64m",
        "ipc_mode": "private",
        # Under memory pressure on the host, sandboxes go before the bot or the engine.
        "oom_score_adj": 500,
    }
    return volume, container


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
            runtimes = client.info().get("Runtimes", {})
            if runtime not in runtimes:
                raise SandboxError(
                    f"The Docker engine has no runtime {runtime!r} "
                    f"(it has: {', '.join(runtimes)}). "
                    "Install gVisor and register it as 'runsc' (scripts/ensure-docker.sh does), "
                    "or set CELLMATE_SANDBOX_RUNTIME=runc."
                )

        await asyncio.to_thread(inspect)

    async def start(self, limits: SandboxLimits, input_tar: bytes | None) -> DockerSandbox:
        client = await self.client()
        name = f"cellmate-{uuid.uuid4().hex[:16]}"
        try:
            container, raw = await asyncio.to_thread(self._create, client, name, limits, input_tar)
        except BaseException:
            await asyncio.to_thread(_remove, client, name, name)
            raise
        try:
            reader, writer = await asyncio.open_connection(sock=raw, limit=MAX_LINE_BYTES)
            await asyncio.to_thread(container.start)
            # A tmpfs volume only holds data while it is mounted, that is while the container
            # runs; so files go in after the start (the runner needs none to get ready).
            if input_tar:
                await asyncio.to_thread(container.put_archive, DATA_DIR, input_tar)
        except BaseException:
            raw.close()
            await asyncio.to_thread(_remove, client, name, name)
            raise
        return DockerSandbox(client, container, name, reader, writer)

    def _create(
        self, client: docker.DockerClient, name: str, limits: SandboxLimits, input_tar: bytes | None
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
            return len(containers)

        return await asyncio.to_thread(sweep)

    async def close(self) -> None:
        if self._client is not None:
            await asyncio.to_thread(self._client.close)
            self._client = None
