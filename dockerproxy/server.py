"""The proxy's server: one request per connection, checked, rebuilt, then relayed.

    client --(its request)--> read strictly --> route --> build the body --> check labels
           <--(the engine's answer)-- relay <-- the proxy's own request --> engine

`attach` is the one request that becomes a two-way stream, and only once the engine has
answered 101; everything else is answered and the connection closed. A tar stream put into a
sandbox is rebuilt on its way (`tarstream`), in a thread, and sent on in chunks as it is read.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import aiohttp

from dockerproxy import bodies, jsonbody, networks
from dockerproxy.errors import ObjectMissing, RequestRefused
from dockerproxy.policy import MiB, Policy
from dockerproxy.routes import Kind, Plan, plan
from dockerproxy.tarstream import Rebuilt, TarCaps, rebuild
from dockerproxy.wire import MAX_HEAD, Request, answer, read_request, request_head
from dockerproxy.wire import read_response_head as read_answer_head

log = logging.getLogger(__name__)

MAX_JSON_BODY = 1024 * 1024
HEAD_TIMEOUT_S = 30
UPLOAD_IDLE_S = 60
"""An upload that sends nothing for this long is given up."""
UPLOADS_AT_ONCE = 4
VOLUME_SIZE = re.compile(r"(?:^|,)size=(?P<number>[0-9]{1,12})(?P<unit>[kmg]?)(?:,|$)")


class DockerProxy:
    def __init__(self, upstream: str, policy: Policy | None = None) -> None:
        """`upstream`: a unix socket path, or host:port of a TCP engine."""
        self.upstream = upstream
        self.policy = policy or Policy()
        self._session: aiohttp.ClientSession | None = None
        self._uploads = ThreadPoolExecutor(UPLOADS_AT_ONCE, thread_name_prefix="tar-upload")
        # The event loop holds a connection's task only while one of its sockets waits for
        # the selector: a reference here keeps every connection's task until it ends.
        self._serving: set[asyncio.Task[None]] = set()

    @property
    def _unix(self) -> bool:
        return self.upstream.startswith("/")

    async def start(self, host: str, port: int) -> asyncio.Server:
        connector: aiohttp.BaseConnector = (
            aiohttp.UnixConnector(path=self.upstream) if self._unix else aiohttp.TCPConnector()
        )
        self._session = aiohttp.ClientSession(connector=connector)
        return await asyncio.start_server(self._serve, host, port, limit=MAX_HEAD)

    async def close(self) -> None:
        for task in list(self._serving):
            task.cancel()
        await asyncio.gather(*self._serving, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
        self._uploads.shutdown(wait=False, cancel_futures=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._serving.add(task)
            task.add_done_callback(self._serving.discard)
        upstream: asyncio.StreamWriter | None = None
        try:
            try:
                # A client that sends its head or JSON body slowly never holds a connection
                # open for long; a tar stream into a sandbox is given up once it stalls.
                async with asyncio.timeout(HEAD_TIMEOUT_S):
                    request = await read_request(reader)
                    if request is None:
                        return
                    route = plan(request, self.policy)
                    body = await self._body(route, request, reader)
                if route.info:
                    await answer(writer, 200, await self._info())
                    return
                path = route.path
                found: dict[str, Any] = {}
                if route.target is not None:
                    found = await self._sandbox(*route.target)
                    path = path.replace("{id}", _key(route.target[0], found))
                caps = await self._tar_caps(found) if route.body == "tar" else None
            except RequestRefused as exc:
                log.warning("refused a request: %s", exc)
                status = 404 if isinstance(exc, ObjectMissing) else 403
                await answer(writer, status, {"message": f"cellmate docker-proxy: {exc}"})
                return
            except TimeoutError:
                return
            upstream_reader, upstream = await self._connect()
            content_type = dict.fromkeys(("container", "volume", "network"), "application/json")
            upstream.write(
                request_head(
                    route.method,
                    path,
                    route.query,
                    request.version,
                    content_type="application/x-tar"
                    if route.body == "tar"
                    else content_type.get(route.body),
                    length=_length(body),
                    chunked=route.body == "tar",
                    upgrade=route.upgrade,
                )
            )
            if body is not None:
                upstream.write(body)
            if caps is not None:
                refusal = await self._put_tar(reader, request.length, upstream, caps)
                if refusal is not None:
                    # Unfinished chunks: the engine fails the upload at the refused member.
                    upstream.close()
                    log.warning("refused a request: %s", refusal)
                    await answer(writer, 403, {"message": f"cellmate docker-proxy: {refusal}"})
                    return
            with contextlib.suppress(ConnectionError):
                await upstream.drain()
            status, head = await read_answer_head(upstream_reader)
            writer.write(head)
            await writer.drain()
            if route.upgrade and status == 101:
                await asyncio.gather(_relay(upstream_reader, writer), _relay(reader, upstream))
            else:
                await _relay(upstream_reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            for stream in (writer, upstream):
                if stream is not None:
                    with contextlib.suppress(Exception):
                        stream.close()

    async def _body(
        self, route: Plan, request: Request, reader: asyncio.StreamReader
    ) -> bytes | None:
        """The body the engine gets, built by the proxy; None for none (or a tar stream)."""
        if route.body == "tar":
            # Headers, padding and the end blocks: a little more than the files themselves.
            if request.length > self.policy.max_upload_mb * MiB + MiB:
                raise RequestRefused(f"uploads may be at most {self.policy.max_upload_mb} MiB")
            return None
        if route.body == "none":
            return None
        if request.length > MAX_JSON_BODY:
            raise RequestRefused("the request body is too large")
        raw = await reader.readexactly(request.length)
        if route.body == "volume":
            return _encode(bodies.volume(jsonbody.decode(raw), self.policy))
        if route.body == "network":
            return _encode(networks.create_body(jsonbody.decode(raw), self.policy))
        built = bodies.container(jsonbody.decode(raw), self.policy)
        if built.network is not None:
            # The network as the engine has it: labelled for this instance, and made as the
            # sandbox network is; the container joins it by id, with the proxy's variables.
            found = await self._sandbox("networks", built.network)
            info = networks.check_network(found, self.policy)
            built.body["HostConfig"]["NetworkMode"] = info.id
            built.body["Env"] += networks.egress_environment(
                built.egress_env or {}, info, self.policy
            )
        # The data volume must be one of the sandboxes' own tmpfs volumes.
        volume = await self._sandbox("volumes", built.volume)
        mount = built.body["HostConfig"]["Mounts"][0]
        mount["Source"] = _key("volumes", volume)
        # Should the volume go before the engine makes the container, the engine makes one
        # like it (the same tmpfs options and labels) rather than a plain one on its disk.
        mount["VolumeOptions"] = {
            "Labels": dict(volume.get("Labels") or {}),
            "DriverConfig": {
                "Name": str(volume.get("Driver") or "local"),
                "Options": dict(volume.get("Options") or {}),
            },
        }
        return _encode(built.body)

    async def _sandbox(self, kind: Kind, name: str) -> dict[str, Any]:
        """What the engine shows of an object that exists and carries both of the labels of
        this proxy's instance (the engine found it by id, name or id prefix: the caller goes
        on with its full id, never the name again)."""
        found = await self._lookup(f"/{kind}/{name}" + ("/json" if kind == "containers" else ""))
        if kind == "networks" and (
            found is None or (found.get("Name") != name and found.get("Id") != name)
        ):
            # The engine also finds networks by id prefix: only the full name or id is served.
            raise ObjectMissing(f"no such network: {name}")
        if found is None:
            raise ObjectMissing(f"no such {kind[:-1]}: {name}")
        holder = (found.get("Config") or {}) if kind == "containers" else found
        labels = holder.get("Labels") or {}
        if any(labels.get(key) != value for key, value in self.policy.labels.items()):
            raise RequestRefused(
                f"{kind[:-1]} {name} is not a Cellmate sandbox of this instance "
                f"({self.policy.instance})"
            )
        return found

    async def _tar_caps(self, container: dict[str, Any]) -> TarCaps:
        """What a tar put into this sandbox may hold: no more than its volume does."""
        most = self.policy.max_upload_mb * MiB
        for mount in container.get("Mounts") or []:
            if mount.get("Destination") == bodies.DATA_DIR and mount.get("Type") == "volume":
                volume = await self._sandbox("volumes", str(mount.get("Name")))
                size = VOLUME_SIZE.search(str((volume.get("Options") or {}).get("o", "")))
                if size:
                    most = min(most, int(size["number"]) * bodies.UNITS[size["unit"]])
        return TarCaps(
            uid=self.policy.uid,
            gid=self.policy.gid,
            max_bytes=most,
            max_member_bytes=min(most, self.policy.max_file_size_mb * MiB),
            max_members=self.policy.max_upload_members,
        )

    async def _put_tar(
        self,
        reader: asyncio.StreamReader,
        length: int,
        upstream: asyncio.StreamWriter,
        caps: TarCaps,
    ) -> str | None:
        """Rebuilds the client's tar into the engine's request; the reason when it is refused
        (or None when the whole tar went through and the chunks are finished)."""
        loop = asyncio.get_running_loop()
        source = _LoopSource(loop, reader, length)
        sink = _ChunkedSink(loop, upstream)
        refusal: str | None = None
        try:
            done: Rebuilt = await loop.run_in_executor(self._uploads, rebuild, source, sink, caps)
            log.info("put %d files and folders (%d bytes) into a sandbox", done.members, done.bytes)
        except RequestRefused as exc:
            refusal = str(exc)
        except TimeoutError:
            refusal = f"the upload sent nothing for {UPLOAD_IDLE_S} s"
        except ConnectionError:
            pass  # the engine stopped reading: its answer says why
        else:
            upstream.write(b"0\r\n\r\n")
        # The rest of the body (a tar's padding, or all that follows a refused member) is read
        # so that the client, which sends it all before it reads, gets the answer.
        with contextlib.suppress(TimeoutError):
            await _discard(reader, source.left)
        return refusal

    async def _info(self) -> dict[str, Any]:
        """What the executor reads of /info: the runtimes it may use, and the version."""
        found = await self._lookup("/info") or {}
        runtimes = found.get("Runtimes") or {}
        usable = set(self.policy.runtimes)
        if self.policy.egress_network and "runsc" in usable:
            usable.add("runsc-net")  # gVisor with a network stack, for the sandbox network
        return {
            "ServerVersion": found.get("ServerVersion", ""),
            "Runtimes": {name: {"path": name} for name in sorted(runtimes) if name in usable},
        }

    async def _lookup(self, path: str) -> dict[str, Any] | None:
        assert self._session is not None
        base = "http://docker" if self._unix else f"http://{self.upstream}"
        async with self._session.get(base + path) as response:
            if response.status == 404:
                return None
            if response.status != 200:
                raise RequestRefused(
                    f"the engine could not look up {path} (HTTP {response.status})"
                )
            found = await response.json(content_type=None)
        if not isinstance(found, dict):
            raise RequestRefused(f"the engine's answer for {path} is not an object")
        return found

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._unix:
            return await asyncio.open_unix_connection(self.upstream, limit=MAX_HEAD)
        host, _, port = self.upstream.rpartition(":")
        return await asyncio.open_connection(host, int(port), limit=MAX_HEAD)


def _key(kind: Kind, found: dict[str, Any]) -> str:
    return str(found["Name" if kind == "volumes" else "Id"])


def _encode(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


def _length(body: bytes | None) -> int | None:
    return None if body is None else len(body)


class _LoopSource:
    """The client's body as a blocking file for the rebuilding thread."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, reader: asyncio.StreamReader, length: int
    ) -> None:
        self._loop = loop
        self._reader = reader
        self.left = length

    def read(self, size: int = -1) -> bytes:
        if self.left <= 0 or size == 0:
            return b""
        wanted = min(self.left if size < 0 else size, self.left, 65536)
        chunk = asyncio.run_coroutine_threadsafe(
            asyncio.wait_for(self._reader.read(wanted), UPLOAD_IDLE_S), self._loop
        ).result(UPLOAD_IDLE_S + 5)
        self.left -= len(chunk)
        if not chunk:
            self.left = 0
        return chunk


class _ChunkedSink:
    """The engine's request body, in HTTP chunks, written from the rebuilding thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, writer: asyncio.StreamWriter) -> None:
        self._loop = loop
        self._writer = writer

    def write(self, data: bytes, /) -> int:
        if data:
            asyncio.run_coroutine_threadsafe(self._send(bytes(data)), self._loop).result(
                UPLOAD_IDLE_S + 5
            )
        return len(data)

    async def _send(self, data: bytes) -> None:
        self._writer.write(b"%x\r\n" % len(data) + data + b"\r\n")
        await asyncio.wait_for(self._writer.drain(), UPLOAD_IDLE_S)


async def _discard(reader: asyncio.StreamReader, length: int) -> None:
    async with asyncio.timeout(UPLOAD_IDLE_S):
        while length > 0 and (chunk := await reader.read(min(length, 65536))):
            length -= len(chunk)


async def _relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    finally:
        with contextlib.suppress(Exception):
            if writer.can_write_eof():
                writer.write_eof()
