"""A network namespace of the test's own, joined to this host by a veth pair, with an HTTP
listener inside it: the only outside target the egress tests ever reach.

The namespace's address is taken from 192.88.99.0/24, the deprecated 6to4 relay anycast
block (RFC 7526): an address the proxy treats as public, as it must for an allowed host, yet
one nothing else on this machine has reason to use. A /30 of it is routed into the
namespace for the test's duration only; nothing is sent beyond the veth pair.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

BLOCK = "192.88.99"
WAIT_S = 10.0
START_S = 15.0
"""How long a script in the namespace may take to print its first line."""
RESPONSE_SIZE = 1000
"""The listener's answer body: a known size, for the byte counts."""

LISTENER = r"""
import asyncio, json, sys

SIZE = int(sys.argv[2])

async def serve(reader, writer):
    peer = writer.get_extra_info("peername")
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        print(json.dumps({"peer": peer[0], "line": None}), flush=True)
        writer.close()
        return
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(
        (k.strip().lower(), v.strip()) for k, _, v in (l.partition(":") for l in lines[1:] if l)
    )
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    target = lines[0].split(" ")[1] if lines[0].count(" ") >= 2 else ""
    if target.startswith("/redirect?to="):
        print(json.dumps({"peer": peer[0], "line": lines[0], "host": headers.get("host"),
                          "body": len(body)}), flush=True)
        writer.write(b"HTTP/1.1 302 Found\r\nLocation: %s\r\nContent-Length: 0\r\n"
                     b"Connection: close\r\n\r\n" % target[len("/redirect?to="):].encode())
        await writer.drain()
        writer.close()
        return
    print(json.dumps({"peer": peer[0], "line": lines[0], "host": headers.get("host"),
                      "body": len(body)}), flush=True)
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % SIZE)
    writer.write(b"n" * SIZE)
    await writer.drain()
    writer.close()

async def main():
    server = await asyncio.start_server(serve, sys.argv[1], 0)
    print("PORT", server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()

asyncio.run(main())
"""


MADE: list[str] = []
"""The namespaces this process made, in order: a test checks that its own are gone (others
run in parallel)."""


def left_behind(since: int) -> list[str]:
    """The namespaces made here since `len(MADE)` was `since` that still exist."""
    listed = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, check=True, timeout=30
    ).stdout.split()
    return [name for name in MADE[since:] if name in listed]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def _taken(parent: str | None = None) -> str:
    where = ["-n", parent] if parent else []
    return subprocess.run(
        ["ip", *where, "-o", "-4", "addr", "show"],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout


@dataclass
class Listener:
    """The namespace's HTTP listener, and every request that reached it."""

    address: str
    port: int
    hits: list[dict[str, Any]] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def wait_for(self, count: int) -> list[dict[str, Any]]:
        """The hits once there are `count` of them (within a deadline)."""
        async with asyncio.timeout(WAIT_S):
            while len(self.hits) < count:
                self.arrived.clear()
                await self.arrived.wait()
        return self.hits


@dataclass(frozen=True)
class Namespace:
    name: str
    address: str
    """The namespace's side of the veth pair."""
    host_address: str
    """This host's side."""


@asynccontextmanager
async def namespace(parent: str | None = None) -> AsyncIterator[Namespace]:
    """A fresh namespace with its veth pair up (needs root), joined to this host or to the
    namespace `parent` (the test cluster's, whose processes then reach it); removed
    whatever happens."""
    tag = uuid.uuid4().hex[:8]
    name, outside, inside = f"cm-egress-{tag}", f"cme{tag}h", f"cme{tag}n"
    taken = _taken(parent)
    free = [b for b in range(4, 252, 4) if f"{BLOCK}.{b + 1}/" not in taken]
    base = random.choice(free)  # noqa: S311 - spreads concurrent runs, no secret
    host_address, address = f"{BLOCK}.{base + 1}", f"{BLOCK}.{base + 2}"
    near = ["-n", parent] if parent else []
    MADE.append(name)
    try:
        _ip("netns", "add", name)
        _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
        _ip("link", "set", inside, "netns", name)
        if parent:
            _ip("link", "set", outside, "netns", parent)
        _ip(*near, "addr", "add", f"{host_address}/30", "dev", outside)
        _ip(*near, "link", "set", outside, "up")
        _ip("-n", name, "addr", "add", f"{address}/30", "dev", inside)
        _ip("-n", name, "link", "set", inside, "up")
        _ip("-n", name, "link", "set", "lo", "up")
        yield Namespace(name, address, host_address)
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            _ip(*near, "link", "del", outside)  # takes its peer with it
        with contextlib.suppress(subprocess.CalledProcessError):
            _ip("netns", "del", name)


@asynccontextmanager
async def recording_in(
    space: Namespace,
    script: str,
    args: list[str],
    seen: list[dict[str, Any]],
    arrived: asyncio.Event,
) -> AsyncIterator[bytes]:
    """Python `script` (with `args`) run inside `space`; yields the first line it prints,
    then adds every later line (JSON) to `seen`, setting `arrived`; stopped at the end."""
    process = await asyncio.create_subprocess_exec(
        "ip", "netns", "exec", space.name, sys.executable, "-c", script, *args,
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    reading: asyncio.Task[None] | None = None
    try:
        assert process.stdout is not None
        first = await asyncio.wait_for(process.stdout.readline(), START_S)

        async def read(stream: asyncio.StreamReader) -> None:
            while line := await stream.readline():
                seen.append(json.loads(line))
                arrived.set()

        reading = asyncio.create_task(read(process.stdout))
        yield first
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        if reading is not None:
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading


@asynccontextmanager
async def listening_in(space: Namespace) -> AsyncIterator[Listener]:
    """The HTTP listener inside `space`, recording every request, for the duration."""
    hits: list[dict[str, Any]] = []
    arrived = asyncio.Event()
    args = [space.address, str(RESPONSE_SIZE)]
    async with recording_in(space, LISTENER, args, hits, arrived) as first:
        assert first.startswith(b"PORT "), first
        yield Listener(space.address, int(first.split()[1]), hits, arrived)
