"""The egress proxy as a running server on loopback. Its only reachable target is the HTTP
listener inside a network namespace each test creates; loopback listeners the test starts
stand for what must never be reached, and must record no hit. Names are resolved by the
proxy's resolver seam from the test's table, never by DNS."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from bench.standins import netns
from bench.standins.netns import RESPONSE_SIZE, Listener, Namespace, listening_in, namespace
from egressproxy import REFUSED_HEADER, Audit, Door, Grants, StaticOwners, StaticResolver
from egressproxy.audit import UNKNOWN
from egressproxy.server import EgressProxy

pytestmark = pytest.mark.netns

OWNER = "discord:guild/channel"
TIMEOUT_S = 10


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    sent: int = 0
    """Bytes the client sent through a CONNECT tunnel."""
    received: int = 0
    """Bytes the client received through the tunnel."""


def _head(raw: bytes) -> tuple[int, dict[str, str]]:
    lines = raw.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    return int(lines[0].split(" ")[1]), headers


async def _read_answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    status, headers = _head(await reader.readuntil(b"\r\n\r\n"))
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return status, headers, body


async def ask(
    proxy: tuple[str, int],
    request: bytes,
    tunnel: bytes | None = None,
    source: str = "127.0.0.1",
) -> Answer:
    """Send one request to the proxy, as a sandbox at `source` would; for a CONNECT, send
    `tunnel` through it once it is open."""
    async with asyncio.timeout(TIMEOUT_S):
        reader, writer = await asyncio.open_connection(*proxy, local_addr=(source, 0))
        try:
            writer.write(request)
            await writer.drain()
            status, headers, body = await _read_answer(reader)
            if status != 200 or tunnel is None:
                return Answer(status, headers, body)
            writer.write(tunnel)
            await writer.drain()
            raw = await reader.read()  # the host closes when it has answered
            inner_status, inner_headers = _head(raw.partition(b"\r\n\r\n")[0] + b"\r\n\r\n")
            return Answer(
                inner_status, inner_headers, raw.partition(b"\r\n\r\n")[2], len(tunnel), len(raw)
            )
        finally:
            writer.close()


def get(host: str, port: int, path: str = "/data", body: bytes = b"") -> bytes:
    method = "POST" if body else "GET"
    return (
        f"{method} http://{host}:{port}{path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body


def connect(host: str, port: int) -> bytes:
    return f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()


INNER = b"GET /through HTTP/1.1\r\nHost: tunnelled\r\nConnection: close\r\n\r\n"


@dataclass
class Loopback:
    """Listeners on this host's loopback: what no request may ever reach."""

    ports: dict[str, int] = field(default_factory=dict)
    reached_by: list[str] = field(default_factory=list)


@asynccontextmanager
async def on_loopback(port: int = 0) -> AsyncIterator[Loopback]:
    found = Loopback()

    async def accepted(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        found.reached_by.append(str(writer.get_extra_info("peername")))
        writer.close()

    servers = []
    try:
        for address in ("127.0.0.1", "::1"):
            try:
                server = await asyncio.start_server(accepted, address, port)
            except OSError:
                # A host without IPv6 loopback: the IPv6 spellings are still asked for (and
                # refused), on the IPv4 listener's port.
                assert address == "::1"
                found.ports[address] = found.ports["127.0.0.1"]
                continue
            servers.append(server)
            found.ports[address] = int(server.sockets[0].getsockname()[1])
        yield found
    finally:
        for server in servers:
            server.close()
            await server.wait_closed()


@dataclass
class Setup:
    space: Namespace
    target: Listener
    proxy: tuple[str, int]
    owners: StaticOwners
    resolver: StaticResolver
    audit: Audit

    def grant(self, *doors: str, once: tuple[str, ...] = ()) -> None:
        self.owners.set(
            "127.0.0.1",
            Grants(
                OWNER,
                operator=(Door.parse("pypi.org"),),
                channel=tuple(Door.parse(door) for door in doors),
                once=tuple(Door.parse(door) for door in once),
            ),
        )


@pytest.fixture
async def setup() -> AsyncIterator[Setup]:
    owners, resolver, audit = StaticOwners(), StaticResolver(), Audit()
    async with namespace() as space, listening_in(space) as target:
        resolver.table["api.test"] = [space.address]
        resolver.table["closed.test"] = [space.address]
        async with EgressProxy(owners, resolver, audit) as proxy:
            bound = await proxy.start("127.0.0.1", 0)
            found = Setup(space, target, bound, owners, resolver, audit)
            found.grant()
            yield found


async def test_an_allowed_host_is_reached_over_http_and_connect(setup: Setup) -> None:
    port = setup.target.port
    setup.grant(f"api.test:{port}")
    plain = await ask(setup.proxy, get("api.test", port))
    assert plain.status == 200
    assert plain.body == b"n" * RESPONSE_SIZE
    tunnelled = await ask(setup.proxy, connect("api.test", port), INNER)
    assert tunnelled.status == 200
    assert tunnelled.body == b"n" * RESPONSE_SIZE
    hits = await setup.target.wait_for(2)
    assert [hit["line"] for hit in hits] == ["GET /data HTTP/1.1", "GET /through HTTP/1.1"]
    assert hits[0]["host"] == f"api.test:{port}"  # the host sees the name it was asked by
    assert {hit["peer"] for hit in hits} == {setup.space.host_address}
    assert setup.resolver.asked == ["api.test", "api.test"]


async def test_a_closed_door_answers_403_with_the_reason_and_reaches_nothing(
    setup: Setup,
) -> None:
    port = setup.target.port
    setup.grant(f"api.test:{port}")
    for request in (get("closed.test", port), connect("closed.test", port)):
        answer = await ask(setup.proxy, request, INNER)
        assert answer.status == 403
        assert answer.body == f"closed.test:{port} is not open to this channel\n".encode()
        assert answer.headers[REFUSED_HEADER.lower()] == f"closed.test:{port}"
        assert answer.headers["content-type"].startswith("text/plain")
    # A closed door's name is not even looked up; the namespace saw nothing.
    assert setup.resolver.asked == []
    assert setup.target.hits == []
    # The same port on an open name goes through: the listener was there all along.
    assert (await ask(setup.proxy, get("api.test", port))).status == 200
    assert len(await setup.target.wait_for(1)) == 1


async def test_loopback_is_refused_in_every_spelling_and_through_names(setup: Setup) -> None:
    async with on_loopback() as loopback:
        v4, v6 = loopback.ports["127.0.0.1"], loopback.ports["::1"]
        setup.resolver.table.update(
            {
                "localhost": ["127.0.0.1"],
                "local.test": ["127.0.0.1"],
                "mixed.test": [setup.space.address, "127.0.0.1"],
                "six.test": ["::1"],
            }
        )
        targets = [
            (host, v4)
            for host in (
                "127.0.0.1",
                "127.1",
                "127.0.1",
                "2130706433",
                "0x7f000001",
                "0x7f.1",
                "0177.0.0.1",
                "017700000001",
                "localhost",
                "local.test",
                "mixed.test",
            )
        ] + [(host, v6) for host in ("[::1]", "[0:0:0:0:0:0:0:1]", "six.test")]
        targets += [("[::ffff:127.0.0.1]", v4), ("[::ffff:7f00:1]", v4)]
        setup.grant(*(f"{host}:{port}" for host, port in targets))
        for host, port in targets:
            for request in (get(host, port), connect(host, port)):
                answer = await ask(setup.proxy, request, INNER)
                assert answer.status == 403, (host, answer)
                assert answer.headers[REFUSED_HEADER.lower()].endswith(f":{port}")
                assert b"loopback" in answer.body or b"IPv4-mapped" in answer.body, answer.body
        # The request form with only a Host header, and the proxy's own port, likewise.
        own = f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{v4}\r\nConnection: close\r\n\r\n".encode()
        assert (await ask(setup.proxy, own)).status == 403
        assert (await ask(setup.proxy, get("127.0.0.1", setup.proxy[1]))).status == 403
        assert loopback.reached_by == []
    assert setup.target.hits == []


async def test_a_changing_dns_answer_cannot_rebind_the_connection(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = setup.target.port
    answers = iter([[setup.space.address], [setup.space.address], ["127.0.0.1"]])
    setup.resolver.table["rebind.test"] = lambda: next(answers)
    setup.grant(f"rebind.test:{port}")
    system_asked = rebind_system_resolver(monkeypatch, "rebind.test")
    async with on_loopback(port) as loopback:
        assert (await ask(setup.proxy, get("rebind.test", port))).status == 200
        assert (await ask(setup.proxy, connect("rebind.test", port), INNER)).status == 200
        third = await ask(setup.proxy, get("rebind.test", port))
        assert third.status == 403
        assert (
            third.body == f"rebind.test:{port} resolves to 127.0.0.1, a loopback address\n".encode()
        )
        assert loopback.reached_by == []
    # Both allowed requests went to the address that was checked, and the name was never
    # handed to the system's resolver (which would have answered loopback).
    assert len(await setup.target.wait_for(2)) == 2
    assert system_asked == []
    assert setup.resolver.asked == ["rebind.test"] * 3


def rebind_system_resolver(monkeypatch: pytest.MonkeyPatch, name: str) -> list[str]:
    """From now on the system resolver answers 127.0.0.1 for `name`, and records asking."""
    asked: list[str] = []
    lookup = socket.getaddrinfo

    def rebound(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host == name:
            asked.append(host)
            return lookup("127.0.0.1", *args, **kwargs)
        return lookup(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebound)
    return asked


async def test_a_redirect_is_not_followed_and_its_target_is_decided_again(
    setup: Setup,
) -> None:
    port = setup.target.port
    async with on_loopback() as loopback:
        inside = f"http://127.0.0.1:{loopback.ports['127.0.0.1']}/"
        setup.grant(f"api.test:{port}", f"127.0.0.1:{loopback.ports['127.0.0.1']}")
        answer = await ask(setup.proxy, get("api.test", port, f"/redirect?to={inside}"))
        assert answer.status == 302
        assert answer.headers["location"] == inside
        followed = await ask(setup.proxy, get("127.0.0.1", loopback.ports["127.0.0.1"]))
        assert followed.status == 403
        assert loopback.reached_by == []
    assert len(await setup.target.wait_for(1)) == 1


async def test_a_sandbox_nobody_owns_is_refused(setup: Setup) -> None:
    setup.grant(f"api.test:{setup.target.port}")
    answer = await ask(setup.proxy, get("api.test", setup.target.port), source="127.0.0.2")
    assert answer.status == 403
    assert answer.body == b"no conversation owns this sandbox\n"
    assert setup.audit.totals(UNKNOWN)["refused"] == 1
    assert setup.target.hits == []


async def test_the_audit_counts_bytes_and_verdicts_per_owner(setup: Setup) -> None:
    port = setup.target.port
    setup.grant(once=(f"api.test:{port}",))
    posted = await ask(setup.proxy, get("api.test", port, body=b"u" * 300))
    tunnelled = await ask(setup.proxy, connect("api.test", port), INNER)
    refused = await ask(setup.proxy, get("closed.test", port))
    assert (posted.status, tunnelled.status, refused.status) == (200, 200, 403)
    await setup.target.wait_for(2)
    expected = {
        "allowed": 2,
        "refused": 1,
        # HTTP: the bodies; a tunnel: every byte each way.
        "bytes_up": 300 + tunnelled.sent,
        "bytes_down": RESPONSE_SIZE + tunnelled.received,
    }
    assert await settled(lambda: setup.audit.totals(OWNER), expected) == expected
    counts = {
        (key.host, key.allowed): count.requests for key, count in setup.audit.counts().items()
    }
    assert counts == {("api.test", True): 2, ("closed.test", False): 1}


async def settled(read: Callable[[], dict[str, int]], expected: dict[str, int]) -> dict[str, int]:
    """The counters once they equal `expected`, or as they are at the deadline: a tunnel's
    last bytes are counted as the proxy relays them, a moment after the client has them."""
    try:
        async with asyncio.timeout(TIMEOUT_S):
            # The audit signals nothing when it counts: poll it.
            while read() != expected:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
    except TimeoutError:
        pass
    return read()


@pytest.fixture(autouse=True)
def _no_leftover_namespaces() -> Iterator[None]:
    since = len(netns.MADE)
    yield
    assert netns.left_behind(since) == []
