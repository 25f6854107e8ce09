"""Sandboxes as hardened Docker containers, driven through the Engine API.

The runner inside is reached through the container's attached stdin/stdout (works under
runc and gVisor, with a remote engine, and from inside a container); files move as tar
streams through the archive calls. /mnt/data is a size-capped tmpfs volume owned by the
container, so archive calls work on a read-only root and under gVisor alike.

The host chooses each sandbox's key and writes it to the runner's stdin (`hello`) before
any user code exists; the sandbox's stdout, the protocol stream, is never stored (log driver
`none`), so neither the key nor anything a user's code prints stays on the engine's disk.

In `CELLMATE_NETWORK=allowlist` mode sandboxes join the instance's sandbox network, made on
the first start (`egress.EgressNetwork`), whose gateway is where the egress proxy listens.

This module starts and sweeps sandboxes; one sandbox is `docker_sandbox.DockerSandbox`, and
what each asks the engine for is in `docker_specs.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import os
import socket
import uuid
from collections.abc import Collection, Mapping
from typing import Any

import docker
import docker.errors
from docker.models.containers import Container

from executor import docker_snapshots as snapshots
from executor.docker_sandbox import DockerSandbox, going, remove_sandbox
from executor.docker_specs import (
    DATA_DIR,
    INSTANCE_LABEL,
    NAME_PATTERN,
    SANDBOX_LABEL,
    VolumeReplaced,
    check_volume,
    remove_plain_volumes,
    sandbox_specs,
)
from executor.docker_templates import Templates
from executor.egress import EgressNetwork, NetworkInfo, engine_runtime
from executor.errors import EngineUnavailable, ImageNotFound, SandboxError, SnapshotFailed
from executor.limits import SandboxLimits
from executor.protocol import PausedSandbox, Recovered, Sandbox

log = logging.getLogger(__name__)

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
        await asyncio.to_thread(remove_sandbox, client, name, name)
    except Exception as exc:  # the engine is away: the next sweep removes it by its labels
        log.warning("could not remove the sandbox %s that did not start: %s", name, exc)


class DockerBackend:
    """Starts sandboxes from `image` on the engine that DOCKER_HOST names; under gVisor it
    also pauses them to memory snapshots and resumes them (docker_snapshots.py)."""

    def __init__(self, image: str, instance: str = "default", session_secret: str = "") -> None:
        self.image = image
        self.instance = instance
        self._secret = session_secret.encode() or os.urandom(32)
        self._keeps_sessions = bool(session_secret)
        self.paused_retention_s = 7 * 86400.0
        """A paused sandbox not resumed within this long is removed by the next sweep (the
        workspace that names it expires too)."""
        self._client: docker.DockerClient | None = None
        self._egress: EgressNetwork | None = None
        self._checked_runtimes: set[str] = set()
        self._info: dict[str, Any] | None = None
        self.templates_enabled = False
        """Cold gVisor sandboxes are clones of a warmed template (docker_templates.py); the
        executor turns it on (`PoolSettings.template`)."""
        self.templates = Templates(self.client)

    @property
    def labels(self) -> dict[str, str]:
        return {SANDBOX_LABEL: "1", INSTANCE_LABEL: self.instance}

    @property
    def keeps_sessions(self) -> bool:
        """With a session secret, sessions' containers outlive this process: the next one
        derives their runners' keys again and attaches to them (`recover`)."""
        return self._keeps_sessions

    def key_for(self, name: str) -> bytes:
        """The runner key of the container `name`: only a process with the secret can make
        it (without one, the secret is this process's own random one)."""
        return hmac.new(self._secret, b"cellmate-sandbox " + name.encode(), hashlib.sha256).digest()

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

    async def egress_network(self, proxy_port: int) -> EgressNetwork:
        """The instance's sandbox network (made on first use by `ensure`), whose
        `proxy_address` is where the egress proxy listens."""
        client = await self.client()
        if self._egress is None:
            self._egress = EgressNetwork(client, self.instance, self.labels, proxy_port)
        self._egress.proxy_port = proxy_port
        return self._egress

    async def _network(self, client: docker.DockerClient, limits: SandboxLimits) -> NetworkInfo:
        """The sandbox network for an allowlist sandbox, and its runtime checked once (the
        gVisor one with a network is registered apart from the default `runsc`)."""
        # The network first: where there is none, that is the reason to tell.
        network = await (await self.egress_network(limits.proxy_port)).ensure()
        runtime = engine_runtime(limits.runtime, limits.egress)
        if runtime not in self._checked_runtimes:
            await asyncio.to_thread(lambda: check_runtime(client.info(), runtime))
            self._checked_runtimes.add(runtime)
        return network

    async def start(self, limits: SandboxLimits, input_tar: bytes | None) -> DockerSandbox:
        client = await self.client()
        # A template is cloned by checkpoints: where sandboxes cannot be paused (runc,
        # network access, an engine without checkpoints), there is none.
        if self.templates_enabled and await self.pause_refusal(limits) is None:
            clone = await self.templates.clone(limits, self._created, self._started)
            if clone is not None:
                await self._put_input(clone, input_tar)
                return clone
        return await self._started(limits, input_tar, client)

    async def _started(
        self,
        limits: SandboxLimits,
        input_tar: bytes | None = None,
        client: docker.DockerClient | None = None,
    ) -> DockerSandbox:
        """A sandbox started cold: its runner starts a kernel and warms it up."""
        client = client or await self.client()
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                return await self._start(client, limits, input_tar)
            except VolumeReplaced as exc:
                if attempt == START_ATTEMPTS:
                    raise
                log.warning("%s; starting another sandbox", exc)
        raise AssertionError("unreachable")

    async def _created(self, limits: SandboxLimits) -> DockerSandbox:
        """A sandbox's container made and attached, not started (a clone starts from a
        checkpoint)."""
        client = await self.client()
        sandbox, _ = await self._make(client, f"cellmate-{uuid.uuid4().hex[:16]}", limits, None)
        return sandbox

    async def _make(
        self,
        client: docker.DockerClient,
        name: str,
        limits: SandboxLimits,
        network: NetworkInfo | None,
    ) -> tuple[DockerSandbox, socket.socket]:
        # The thread goes on making the container when the caller is cancelled (a pool that
        # closes): the clean-up waits for it, so nothing it makes afterwards is left behind.
        creating = asyncio.ensure_future(
            asyncio.to_thread(self._create, client, name, limits, network)
        )
        try:
            container, raw = await asyncio.shield(creating)
        except BaseException:
            await asyncio.shield(_abandon(client, name, creating))
            raise
        try:
            sandbox = await _sandbox_on(client, container, raw, self.key_for(name))
        except BaseException:
            raw.close()
            await asyncio.shield(asyncio.to_thread(remove_sandbox, client, name, name))
            raise
        return sandbox, raw

    async def _start(
        self, client: docker.DockerClient, limits: SandboxLimits, input_tar: bytes | None
    ) -> DockerSandbox:
        name = f"cellmate-{uuid.uuid4().hex[:16]}"
        network = await self._network(client, limits) if limits.egress == "allowlist" else None
        sandbox, raw = await self._make(client, name, limits, network)
        try:
            await asyncio.to_thread(sandbox.container.start)
            if network is not None:
                sandbox.address = await asyncio.to_thread(
                    network_address, sandbox.container, network
                )
            await sandbox.hello()
            await self._put_input(sandbox, input_tar)
        except BaseException:
            sandbox.close_stream()
            raw.close()
            await asyncio.shield(asyncio.to_thread(remove_sandbox, client, name, name))
            raise
        return sandbox

    @staticmethod
    async def _put_input(sandbox: DockerSandbox, input_tar: bytes | None) -> None:
        # A tmpfs volume only holds data while it is mounted, that is while the container
        # runs; so files go in after the start (the runner needs none to get ready). No user
        # code exists yet, so this needs no freeze.
        if input_tar:
            await asyncio.to_thread(sandbox.container.put_archive, DATA_DIR, input_tar)

    def _create(
        self,
        client: docker.DockerClient,
        name: str,
        limits: SandboxLimits,
        network: NetworkInfo | None,
    ) -> tuple[Container, socket.socket]:
        volume, container_args = sandbox_specs(self.image, name, limits, self.labels, network)
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
        return container, _attach(client, name)

    async def remove_leftovers(self, keep: Collection[str] = ()) -> int:
        """Remove this instance's sandboxes but those in `keep` and the paused ones (a
        conversation's next run resumes them) younger than `paused_retention_s`."""
        client = await self.client()

        def sweep() -> int:
            selector = [f"{k}={v}" for k, v in self.labels.items()]
            listed = client.api.containers(all=True, filters={"label": selector})
            spared = set(keep)
            removed = 0
            for summary in listed:
                names = {str(n).lstrip("/") for n in summary.get("Names") or []}
                if summary["Id"] in spared or names & spared:
                    spared.update(names)  # and its data volume, which has its name
                    continue
                if snapshots.kept_paused(client, summary, self.paused_retention_s):
                    spared.update(names)
                    continue
                try:
                    client.api.remove_container(summary["Id"], force=True, v=True)
                    removed += 1
                except docker.errors.APIError as exc:
                    if not going(exc):
                        raise
            for volume in client.volumes.list(filters={"label": selector}):
                if volume.name in spared:
                    continue
                with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                    volume.remove(force=True)
            remove_plain_volumes(client)
            # The sandbox network stays: the egress proxy listens on its gateway, and a
            # network made again would have another one. It is removed by remove_network().
            return removed

        return await asyncio.to_thread(sweep)

    async def recover(self, skip: Collection[str] = ()) -> list[Recovered]:
        """The sessions an earlier process left running, attached to again: each runner
        must answer under the key derived for its container, and say whose session it
        holds (a run that process started is interrupted and waited for). Those in `skip`
        (another replica holds them) are not touched."""
        client = await self.client()
        selector = [f"{k}={v}" for k, v in self.labels.items()]
        # Labels are the only filter the Docker API proxy passes on.
        listed = await asyncio.to_thread(client.api.containers, filters={"label": selector})
        names = [
            str(n).lstrip("/")
            for summary in listed
            if summary.get("State") == "running"  # not a frozen one, nor a paused session
            and summary["Id"] not in skip
            for n in summary.get("Names") or []
        ]
        wanted = [name for name in names if NAME_PATTERN.fullmatch(name) and name not in skip]
        found = await asyncio.gather(*(self._resumed(client, name) for name in wanted))
        return [item for item in found if item is not None]

    async def adopt(self, sandbox_id: str) -> Recovered | None:
        """A running sandbox of any instance (another replica's), attached to by its
        container's id (or name)."""
        client = await self.client()
        # Labels are the only filter the Docker API proxy passes on: the id is checked here.
        listed = await asyncio.to_thread(
            client.api.containers, filters={"label": [f"{SANDBOX_LABEL}=1"]}
        )
        for summary in listed:
            names = [str(n).lstrip("/") for n in summary.get("Names") or []]
            if summary["Id"] != sandbox_id and sandbox_id not in names:
                continue
            if summary.get("State") != "running":
                return None
            name = next((n for n in names if NAME_PATTERN.fullmatch(n)), None)
            return None if name is None else await self._resumed(client, name)
        return None

    async def _resumed(self, client: docker.DockerClient, name: str) -> Recovered | None:
        """Attach to the container `name` and ask its runner whose session it holds (None:
        no answer under its key, or no session; it is let go, not removed)."""
        try:
            container = await asyncio.to_thread(client.containers.get, name)
            raw = await asyncio.to_thread(_attach, client, name)
        except (docker.errors.APIError, OSError):
            return None
        sandbox = await _sandbox_on(client, container, raw, self.key_for(name))
        # On the sandbox network (allowlist), the egress proxy knows it by its address.
        networks = container.attrs.get("NetworkSettings", {}).get("Networks") or {}
        sandbox.address = next(
            (str(n["IPAddress"]) for n in networks.values() if n.get("IPAddress")), None
        )
        found = await sandbox.resume()
        if found is None:
            await sandbox.let_go()
        return found

    async def detach(self, sandbox: Sandbox) -> None:
        if isinstance(sandbox, DockerSandbox):
            await sandbox.let_go()

    async def pause_refusal(self, limits: SandboxLimits) -> str | None:
        if self._info is None:
            client = await self.client()
            self._info = await asyncio.to_thread(client.info)
        return snapshots.pause_refusal(self._info, limits)

    async def pause(self, sandbox: Sandbox, max_mb: int) -> PausedSandbox:
        if not isinstance(sandbox, DockerSandbox):
            raise SnapshotFailed("it is not a Docker sandbox")
        client = await self.client()
        paused = await asyncio.to_thread(snapshots.checkpoint, client, sandbox, max_mb)
        await sandbox.let_go()
        return paused

    async def resume(self, paused: PausedSandbox, session: str) -> DockerSandbox:
        if paused.backend != snapshots.BACKEND or not NAME_PATTERN.fullmatch(paused.sandbox):
            raise SnapshotFailed("it was not taken by a Docker sandbox")
        client = await self.client()
        name = paused.sandbox
        # Checked before anything is touched: a record that names a container which is not
        # a paused sandbox of this instance (a running session's, say) leaves it alone.
        attrs = await asyncio.to_thread(snapshots.paused_state, client, name, self.labels)
        raw: socket.socket | None = None
        sandbox: DockerSandbox | None = None
        try:
            raw = await asyncio.to_thread(_attach, client, name)
            container = client.containers.prepare_model(attrs)
            sandbox = await _sandbox_on(client, container, raw, bytes.fromhex(paused.key))
            await asyncio.to_thread(
                snapshots.start_from_checkpoint, client, name, paused.checkpoint
            )
            await asyncio.to_thread(snapshots.remove_checkpoint, client, name, paused.checkpoint)
            await snapshots.handshake(sandbox, session, new_key=self.key_for(name))
        except BaseException as exc:
            if sandbox is not None:
                await sandbox.let_go()
            elif raw is not None:
                raw.close()
            await asyncio.shield(snapshots.discard(client, name))
            if isinstance(exc, SnapshotFailed | asyncio.CancelledError):
                raise
            if isinstance(exc, Exception):
                raise SnapshotFailed(f"it could not be restored: {exc}") from exc
            raise
        return sandbox

    async def remove_paused(self, paused: PausedSandbox) -> None:
        if paused.backend == snapshots.BACKEND and NAME_PATTERN.fullmatch(paused.sandbox):
            await snapshots.discard(await self.client(), paused.sandbox)

    async def remove_network(self) -> None:
        """Remove the instance's sandbox network (when the bot and its egress proxy stop for
        good); the engine refuses while a sandbox is still on it."""
        client = await self.client()
        selector = [f"{k}={v}" for k, v in self.labels.items()]

        def remove() -> None:
            for network in client.networks.list(filters={"label": selector}):
                with contextlib.suppress(docker.errors.NotFound):
                    network.remove()

        await asyncio.to_thread(remove)
        self._egress = None

    async def close(self) -> None:
        await self.templates.close()
        if self._client is not None:
            await asyncio.to_thread(self._client.close)
            self._client = None


async def _sandbox_on(
    client: docker.DockerClient, container: Container, raw: socket.socket, key: bytes
) -> DockerSandbox:
    """The sandbox whose runner is reached through `raw` (its attached socket) with `key`."""
    # Frames are read with readexactly, which ignores the limit; the limit only sets how
    # much the stream buffers unread (twice it) before it stops reading the socket, so
    # between runs a sandbox cannot make the bot hold more than that.
    reader, writer = await asyncio.open_connection(sock=raw, limit=UNREAD_BYTES)
    # A sandbox's container and its data volume share its name.
    return DockerSandbox(client, container, str(container.name), reader, writer, key)


def _attach(client: docker.DockerClient, name: str) -> socket.socket:
    """The container's stdin and multiplexed stdout/stderr, as a socket of our own."""
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
    return raw


def network_address(container: Container, network: NetworkInfo) -> str:
    """The address the engine gave a started sandbox on its network: the egress proxy sees
    its requests come from it, and asks the bot who owns it."""
    container.reload()
    found = container.attrs["NetworkSettings"]["Networks"][network.name]["IPAddress"]
    if not found:
        raise SandboxError(f"the sandbox got no address on {network.name}")
    return str(found)
