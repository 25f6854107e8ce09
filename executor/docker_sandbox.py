"""One sandbox container on the Docker engine, as the executor drives it: the runner's
stream on the attached socket, files in and out as tar archives (frozen while they move,
so the sandbox's code cannot swap a folder for a link meanwhile), and its removal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

import docker
import docker.errors
import requests
from docker.models.containers import Container

from executor import wire
from executor.archive import ChunkReader, ExtractedFiles, OutputCaps, read_output_tar
from executor.backoff import Backoff
from executor.docker_specs import DATA_DIR
from executor.errors import EngineUnavailable, FreezeFailed, SandboxError
from executor.protocol import ExitState, Recovered
from executor.runner_client import claimed_session
from executor.stdio import RunnerStream

log = logging.getLogger(__name__)

RESUME_ANSWER_S = 15.0
T = TypeVar("T")

FREEZE_RETRY = Backoff(attempts=6, first_s=0.05, factor=2.0, max_s=1.0)
"""A freeze that the runtime refuses (runc under load: `unable to freeze`) is tried again
after 0.05, 0.1, 0.2, 0.4 and 0.8 s."""


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
        self.address: str | None = None
        """Its address on the instance's sandbox network (allowlist mode), once started."""

    @property
    def id(self) -> str:
        return str(self._container.id)

    @property
    def container(self) -> Container:
        return self._container

    async def resume(self) -> Recovered | None:
        """Ask a runner an earlier process started whose session it holds (see
        `claimed_session`)."""
        return await claimed_session(self, RESUME_ANSWER_S)

    def rekey_from(self, key: bytes) -> None:
        """A clone restored from a template's checkpoint holds the template's key: this
        side reads and seals with it until the handshake gives the clone its own."""
        self._events.use_key(key)

    def replay_start(self, startup_ms: int) -> None:
        """A clone says nothing on start (the template said it all): its `ready` and `warm`
        come from here, so that it is handed out as any started sandbox."""
        self._events.replay(wire.encode(wire.Ready(startup_ms=startup_ms)))
        self._events.replay(wire.encode(wire.Warm()))

    @property
    def name(self) -> str:
        """The container's name, which its data volume shares."""
        return self._volume_name

    @property
    def key(self) -> bytes:
        """The runner's key now (a paused sandbox's snapshot holds it)."""
        return self._events.key

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

    def close_stream(self) -> None:
        """Close this process's stream to the runner at once (a start that failed)."""
        self._writer.close()

    async def let_go(self) -> None:
        """Close this process's stream to the runner, leaving the container as it is."""
        self.close_stream()
        with contextlib.suppress(ConnectionError, OSError):
            await self._writer.wait_closed()
        self._destroyed = True

    async def destroy(self) -> None:
        """Remove the container and its volume; raises EngineUnavailable (and may be called
        again) when the engine does not answer."""
        if self._destroyed:
            return
        self._writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self._writer.wait_closed()
        # A thread finishes the removal even when the awaiting task is cancelled.
        await _engine(remove_sandbox, self._client, self.id, self._volume_name)
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


def going(exc: docker.errors.APIError) -> bool:
    """Whether the engine says the container is gone, or already being removed (by another
    call: a sweep of the same instance's labels, say)."""
    return exc.status_code == 404 or (exc.status_code == 409 and "already in progress" in str(exc))


def remove_sandbox(client: docker.DockerClient, container_id: str, volume_name: str) -> None:
    try:
        client.api.remove_container(container_id, force=True, v=True)
    except docker.errors.APIError as exc:
        if not going(exc):
            # gVisor cannot kill a frozen sandbox: thaw it, then remove it.
            with contextlib.suppress(docker.errors.APIError):
                client.api.unpause(container_id)
            try:
                client.api.remove_container(container_id, force=True, v=True)
            except docker.errors.APIError as again:
                if not going(again):
                    raise
    _until_removed(client, container_id)
    with contextlib.suppress(docker.errors.NotFound):
        client.api.remove_volume(volume_name, force=True)


REMOVAL_WAIT_S = 30.0


def _until_removed(client: docker.DockerClient, container_id: str) -> None:
    """Wait out a removal another call has under way (the engine answers 409 to a second
    one), so that the volume goes after its container and the caller's "removed" is true."""
    deadline = time.monotonic() + REMOVAL_WAIT_S
    while True:
        try:
            client.api.inspect_container(container_id)
        except docker.errors.NotFound:
            return
        if time.monotonic() > deadline:
            raise SandboxError(f"the Docker engine did not finish removing sandbox {container_id}")
        _wait(0.1)
