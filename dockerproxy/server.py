"""The proxy's server: one request per connection, checked, rebuilt, then relayed.

    client --(its request)--> read strictly --> route --> build the body --> check labels
           <--(the engine's answer)-- relay <-- the proxy's own request --> engine

`attach` is the one request that becomes a two-way stream, and only once the engine has
answered 101; everything else is answered and the connection closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

import aiohttp

from dockerproxy import bodies, jsonbody
from dockerproxy.errors import Refused
from dockerproxy.policy import SANDBOX_LABEL, MiB, Policy
from dockerproxy.routes import Kind, Plan, plan
from dockerproxy.wire import MAX_HEAD, Request, answer, read_request, request_head
from dockerproxy.wire import read_response_head as read_answer_head

log = logging.getLogger(__name__)

MAX_JSON_BODY = 1024 * 1024
HEAD_TIMEOUT_S = 30


class DockerProxy:
    def __init__(self, upstream: str, policy: Policy | None = None) -> None:
        """`upstream`: a unix socket path, or host:port of a TCP engine."""
        self.upstream = upstream
        self.policy = policy or Policy()
        self._session: aiohttp.ClientSession | None = None

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
        if self._session is not None:
            await self._session.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream: asyncio.StreamWriter | None = None
        try:
            try:
                # A client that sends its head or JSON body slowly never holds a connection
                # open for long; tar streams into a sandbox are timed by the engine.
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
                if route.target is not None:
                    path = path.replace("{id}", await self._sandbox(*route.target))
            except Refused as exc:
                log.warning("refused a request: %s", exc)
                await answer(writer, 403, {"message": f"cellmate docker-proxy: {exc}"})
                return
            except TimeoutError:
                return
            upstream_reader, upstream = await self._connect()
            content_type = {"container": "application/json", "volume": "application/json"}
            upstream.write(
                request_head(
                    route.method,
                    path,
                    route.query,
                    request.version,
                    content_type="application/x-tar"
                    if route.body == "tar"
                    else content_type.get(route.body),
                    length=request.length if route.body == "tar" else _length(body),
                    upgrade=route.upgrade,
                )
            )
            if body is not None:
                upstream.write(body)
            elif route.body == "tar":
                await _copy(reader, upstream, request.length)
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
            if request.length > self.policy.max_upload_mb * MiB:
                raise Refused(f"uploads may be at most {self.policy.max_upload_mb} MiB")
            return None
        if route.body == "none":
            return None
        if request.length > MAX_JSON_BODY:
            raise Refused("the request body is too large")
        raw = await reader.readexactly(request.length)
        if route.body == "volume":
            return _encode(bodies.volume(jsonbody.decode(raw), self.policy))
        built = bodies.container(jsonbody.decode(raw), self.policy)
        # The data volume must be one of the sandboxes' own tmpfs volumes.
        volume = await self._sandbox("volumes", built.volume)
        built.body["HostConfig"]["Mounts"][0]["Source"] = volume
        return _encode(built.body)

    async def _sandbox(self, kind: Kind, name: str) -> str:
        """The id (or a volume's name) of an object that exists and carries the label."""
        found = await self._lookup(f"/{kind}/{name}" + ("/json" if kind == "containers" else ""))
        if found is None:
            raise Refused(f"no such {kind[:-1]}: {name}")
        holder = (found.get("Config") or {}) if kind == "containers" else found
        if (holder.get("Labels") or {}).get(SANDBOX_LABEL) != "1":
            raise Refused(f"{kind[:-1]} {name} is not a Cellmate sandbox")
        key = "Id" if kind == "containers" else "Name"
        return str(found[key])

    async def _info(self) -> dict[str, Any]:
        """What the executor reads of /info: the runtimes it may use, and the version."""
        found = await self._lookup("/info") or {}
        runtimes = found.get("Runtimes") or {}
        return {
            "ServerVersion": found.get("ServerVersion", ""),
            "Runtimes": {
                name: {"path": name} for name in sorted(runtimes) if name in self.policy.runtimes
            },
        }

    async def _lookup(self, path: str) -> dict[str, Any] | None:
        assert self._session is not None
        base = "http://docker" if self._unix else f"http://{self.upstream}"
        async with self._session.get(base + path) as response:
            if response.status == 404:
                return None
            if response.status != 200:
                raise Refused(f"the engine could not look up {path} (HTTP {response.status})")
            found = await response.json(content_type=None)
        if not isinstance(found, dict):
            raise Refused(f"the engine's answer for {path} is not an object")
        return found

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._unix:
            return await asyncio.open_unix_connection(self.upstream, limit=MAX_HEAD)
        host, _, port = self.upstream.rpartition(":")
        return await asyncio.open_connection(host, int(port), limit=MAX_HEAD)


def _encode(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


def _length(body: bytes | None) -> int | None:
    return None if body is None else len(body)


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, length: int) -> None:
    while length > 0:
        chunk = await reader.read(min(length, 65536))
        if not chunk:
            raise ConnectionError("the client closed before sending its body")
        writer.write(chunk)
        await writer.drain()
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
