"""A Docker API proxy that lets the bot do only what the executor needs.

Whoever holds the Docker socket is root on the host. Run this proxy with the socket and give
the bot only the proxy's address (`DOCKER_HOST=tcp://docker-proxy:2375`): the bot can then
create, run and remove hardened sandbox containers and their tmpfs volumes, and nothing
else. Every request is checked before it reaches the engine:

- only the endpoints the executor uses are allowed (no exec, no image pulls or builds, no
  networks, no swarm, no plugins);
- a container must be created from the sandbox image, carry the sandbox label, run as a
  non-root user on a read-only root with every capability dropped and no-new-privileges,
  with no host paths, devices, host namespaces or privileged mode;
- a volume must be a labelled tmpfs volume (never a bind of a host folder);
- an existing container or volume may be touched only if it carries the sandbox label;
- lists must be filtered by that label.

One request per connection (the proxy answers `Connection: close`), so no later request on a
kept-alive connection can slip past the checks. `attach` upgrades are relayed both ways.

    python -m executor.socket_proxy --listen 0.0.0.0:2375 --upstream /var/run/docker.sock
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import aiohttp

from executor.docker_backend import SANDBOX_LABEL

log = logging.getLogger(__name__)

MAX_HEAD = 64 * 1024
MAX_CHECKED_BODY = 1024 * 1024
VERSION_PREFIX = re.compile(r"^/v\d+\.\d+(?=/)")
NAME = r"(?P<name>[A-Za-z0-9][A-Za-z0-9_.-]*)"
OPEN = {
    ("GET", "/_ping"),
    ("HEAD", "/_ping"),
    ("GET", "/version"),
    ("GET", "/info"),
}
IMAGE_INSPECT = re.compile(r"^/images/(?P<name>.+)/json$")
CONTAINER_ACTION = re.compile(
    rf"^/containers/{NAME}/(?P<action>start|attach|pause|unpause|kill|wait|json|archive|logs)$"
)
CONTAINER = re.compile(rf"^/containers/{NAME}$")
VOLUME = re.compile(rf"^/volumes/{NAME}$")
ACTION_METHODS = {
    "start": {"POST"},
    "attach": {"POST"},
    "pause": {"POST"},
    "unpause": {"POST"},
    "kill": {"POST"},
    "wait": {"POST"},
    "json": {"GET"},
    "archive": {"GET", "HEAD", "PUT"},
    "logs": {"GET"},
}


class Refused(Exception):
    """The request is not allowed; the message says why."""


@dataclass(frozen=True, slots=True)
class Policy:
    image_prefix: str = "cellmate-sandbox:"
    runtimes: frozenset[str] = frozenset({"runc", "runsc"})
    networks: frozenset[str] = frozenset({"none", "bridge", "default"})


@dataclass(slots=True)
class Request:
    method: str
    target: str
    path: str
    query: dict[str, list[str]]
    headers: list[tuple[str, str]]
    body: bytes | None = None

    def header(self, name: str) -> str:
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return ""


class SocketProxy:
    def __init__(self, upstream: str, policy: Policy | None = None) -> None:
        """`upstream`: a unix socket path, or host:port of a TCP engine."""
        self.upstream = upstream
        self.policy = policy or Policy()
        self._session: aiohttp.ClientSession | None = None

    async def start(self, host: str, port: int) -> asyncio.Server:
        connector: aiohttp.BaseConnector
        if ":" in self.upstream and not self.upstream.startswith("/"):
            connector = aiohttp.TCPConnector()
        else:
            connector = aiohttp.UnixConnector(path=self.upstream)
        self._session = aiohttp.ClientSession(connector=connector)
        return await asyncio.start_server(self._serve, host, port, limit=MAX_HEAD)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_writer: asyncio.StreamWriter | None = None
        try:
            try:
                request = await _read_head(reader)
                if request is None:
                    return
                length = int(request.header("content-length") or 0)
                if request.header("transfer-encoding"):
                    raise Refused("chunked request bodies are not supported")
                if request.method == "POST" and length <= MAX_CHECKED_BODY:
                    request.body = await reader.readexactly(length)
                    length = 0
                await self._check(request)
            except Refused as exc:
                log.warning("refused a request: %s", exc)
                await _answer(writer, 403, {"message": f"cellmate socket proxy: {exc}"})
                return
            upstream_reader, upstream_writer = await self._connect()
            upstream_writer.write(_head(request))
            if request.body is not None:
                upstream_writer.write(request.body)
            await _copy(reader, upstream_writer, length)
            await upstream_writer.drain()
            if request.header("upgrade"):
                await asyncio.gather(
                    _relay(upstream_reader, writer), _relay(reader, upstream_writer)
                )
            else:
                await _relay(upstream_reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            for stream in (writer, upstream_writer):
                if stream is not None:
                    with contextlib.suppress(Exception):
                        stream.close()

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.upstream.startswith("/"):
            return await asyncio.open_unix_connection(self.upstream)
        host, _, port = self.upstream.rpartition(":")
        return await asyncio.open_connection(host, int(port))

    async def _check(self, request: Request) -> None:
        method, path = request.method, request.path
        if (method, path) in OPEN:
            return
        if method == "GET" and IMAGE_INSPECT.match(path):
            return
        if (method, path) == ("GET", "/containers/json") or (method, path) == ("GET", "/volumes"):
            _require_label_filter(request.query)
            return
        if (method, path) == ("POST", "/containers/create"):
            await self._check_container(_json(request.body))
            return
        if (method, path) == ("POST", "/volumes/create"):
            _check_volume(_json(request.body))
            return
        found = CONTAINER_ACTION.match(path)
        if found and method in ACTION_METHODS[found["action"]]:
            await self._require_sandbox("containers", found["name"])
            return
        found = CONTAINER.match(path)
        if found and method == "DELETE":
            await self._require_sandbox("containers", found["name"])
            return
        found = VOLUME.match(path)
        if found and method in ("GET", "DELETE"):
            await self._require_sandbox("volumes", found["name"])
            return
        raise Refused(f"{method} {path} is not something the executor does")

    async def _check_container(self, spec: Mapping[str, Any]) -> None:
        policy = self.policy
        image = str(spec.get("Image") or "")
        if not image.startswith(policy.image_prefix):
            raise Refused(f"containers must use the sandbox image ({policy.image_prefix}...)")
        if (spec.get("Labels") or {}).get(SANDBOX_LABEL) != "1":
            raise Refused(f"containers must carry the {SANDBOX_LABEL} label")
        user = str(spec.get("User") or "")
        if not user or user.split(":")[0] in ("0", "root"):
            raise Refused("containers must run as a non-root user")
        host: Mapping[str, Any] = spec.get("HostConfig") or {}
        if host.get("Privileged"):
            raise Refused("privileged containers are not allowed")
        if not host.get("ReadonlyRootfs"):
            raise Refused("containers must have a read-only root file system")
        if "ALL" not in (host.get("CapDrop") or []) or host.get("CapAdd"):
            raise Refused("containers must drop every capability and add none")
        options = host.get("SecurityOpt") or []
        if "no-new-privileges" not in options or any("unconfined" in o for o in options):
            raise Refused("containers must use no-new-privileges and keep their profiles")
        for key in ("Binds", "Devices", "VolumesFrom", "Links", "DeviceRequests"):
            if host.get(key):
                raise Refused(f"{key} are not allowed")
        for key in ("PidMode", "IpcMode", "UTSMode", "UsernsMode", "CgroupnsMode"):
            if str(host.get(key) or "").startswith(("host", "container:")):
                raise Refused(f"{key} {host.get(key)} shares a namespace")
        if str(host.get("NetworkMode") or "default") not in policy.networks:
            raise Refused(f"network mode {host.get('NetworkMode')} is not allowed")
        if str(host.get("Runtime") or "runc") not in policy.runtimes:
            raise Refused(f"runtime {host.get('Runtime')} is not allowed")
        if host.get("CgroupParent"):
            raise Refused("a cgroup parent is not allowed")
        for mount in host.get("Mounts") or []:
            if mount.get("Type") != "volume":
                raise Refused(f"{mount.get('Type')} mounts are not allowed")
            await self._require_sandbox("volumes", str(mount.get("Source") or ""))

    async def _require_sandbox(self, kind: str, name: str) -> None:
        """The container or volume exists and carries the sandbox label."""
        assert self._session is not None
        base = "http://docker" if self.upstream.startswith("/") else f"http://{self.upstream}"
        url = f"{base}/{kind}/{name}" + ("/json" if kind == "containers" else "")
        async with self._session.get(url) as response:
            if response.status == 404:
                raise Refused(f"no such {kind[:-1]}: {name}")
            if response.status != 200:
                raise Refused(f"cannot inspect {kind[:-1]} {name} (HTTP {response.status})")
            found = await response.json(content_type=None)
        holder = (found.get("Config") or {}) if kind == "containers" else found
        if (holder.get("Labels") or {}).get(SANDBOX_LABEL) != "1":
            raise Refused(f"{kind[:-1]} {name} is not a Cellmate sandbox")


def _check_volume(spec: Mapping[str, Any]) -> None:
    if (spec.get("Labels") or {}).get(SANDBOX_LABEL) != "1":
        raise Refused(f"volumes must carry the {SANDBOX_LABEL} label")
    if str(spec.get("Driver") or "local") != "local":
        raise Refused("volumes must use the local driver")
    options = spec.get("DriverOpts") or {}
    if options.get("type") != "tmpfs" or options.get("device") != "tmpfs":
        raise Refused("volumes must be tmpfs (a bind of a host folder is not allowed)")


def _require_label_filter(query: Mapping[str, list[str]]) -> None:
    try:
        filters = json.loads((query.get("filters") or ["{}"])[0])
    except ValueError:
        raise Refused("filters are not valid JSON") from None
    labels = filters.get("label") or []
    if isinstance(labels, dict):
        labels = list(labels)
    if not any(str(label).startswith(f"{SANDBOX_LABEL}=1") for label in labels):
        raise Refused(f"lists must be filtered by the {SANDBOX_LABEL}=1 label")


def _json(body: bytes | None) -> Mapping[str, Any]:
    try:
        found = json.loads(body or b"{}")
    except ValueError:
        raise Refused("the request body is not JSON") from None
    if not isinstance(found, dict):
        raise Refused("the request body is not a JSON object")
    return found


async def _read_head(reader: asyncio.StreamReader) -> Request | None:
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = raw.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = []
    for line in lines[1:]:
        if line:
            key, _, value = line.partition(":")
            headers.append((key.strip(), value.strip()))
    parts = urlsplit(target)
    path = VERSION_PREFIX.sub("", unquote(parts.path))
    if ".." in path.split("/"):
        raise Refused("paths may not contain ..")
    return Request(method.upper(), target, path, parse_qs(parts.query), headers)


def _head(request: Request) -> bytes:
    """The request line and headers, with one request per connection."""
    upgrade = bool(request.header("upgrade"))
    kept = [
        (key, value)
        for key, value in request.headers
        if key.lower() != "connection" and (upgrade or key.lower() != "upgrade")
    ]
    kept.append(("Connection", "Upgrade" if upgrade else "close"))
    lines = [f"{request.method} {request.target} HTTP/1.1"]
    lines += [f"{key}: {value}" for key, value in kept]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


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


async def _answer(writer: asyncio.StreamWriter, status: int, body: dict[str, str]) -> None:
    payload = json.dumps(body).encode()
    reason = {403: "Forbidden", 400: "Bad Request"}.get(status, "Error")
    writer.write(
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
        + payload
    )
    await writer.drain()


def main() -> None:
    parser = argparse.ArgumentParser(description="A Docker API proxy for the Cellmate bot.")
    parser.add_argument("--listen", default="0.0.0.0:2375", help="host:port to listen on")
    parser.add_argument("--upstream", default="/var/run/docker.sock", help="socket or host:port")
    parser.add_argument("--image-prefix", default="cellmate-sandbox:")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    host, _, port = args.listen.rpartition(":")

    async def run() -> None:
        proxy = SocketProxy(args.upstream, Policy(image_prefix=args.image_prefix))
        server = await proxy.start(host or "0.0.0.0", int(port))  # noqa: S104
        log.info("serving the Docker API for Cellmate on %s", args.listen)
        async with server:
            await server.serve_forever()

    asyncio.run(run())


if __name__ == "__main__":
    main()
