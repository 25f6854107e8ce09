"""What network a sandbox has, shown without touching anyone else's machine: the test starts
its own listeners on this host's addresses (Docker's bridge, the node's veth, the host's
own interface) and the sandbox tries to reach them; whether any other address could be
reached is read from the sandbox's routing table, never tried."""

from __future__ import annotations

import array
import asyncio
import fcntl
import json
import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

SIOCGIFADDR = 0x8915


def host_addresses() -> list[str]:
    """This host's IPv4 addresses outside loopback, one per interface that has one."""
    found: list[str] = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            request = array.array("B", struct.pack("256s", name.encode()[:15]))
            try:
                fcntl.ioctl(probe.fileno(), SIOCGIFADDR, request)
            except OSError:
                continue  # no IPv4 address on this interface
            address = socket.inet_ntoa(request.tobytes()[20:24])
            if not address.startswith("127."):
                found.append(address)
    return found


@dataclass
class Listeners:
    """TCP listeners the test started, and every peer that reached one of them."""

    targets: list[tuple[str, int]] = field(default_factory=list)
    reached_by: list[str] = field(default_factory=list)


@asynccontextmanager
async def listening_on_host() -> AsyncIterator[Listeners]:
    """A listener on each of this host's addresses (a free port each), for the duration."""
    found = Listeners()

    async def accepted(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        found.reached_by.append(str(writer.get_extra_info("peername")))
        writer.close()

    servers: list[asyncio.Server] = []
    try:
        for address in host_addresses():
            server = await asyncio.start_server(accepted, address, 0)
            servers.append(server)
            found.targets.append((address, int(server.sockets[0].getsockname()[1])))
        assert found.targets, "this host has no address outside loopback to listen on"
        yield found
    finally:
        for server in servers:
            server.close()
            await server.wait_closed()


def refuse_outside_network(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """From now on in this test, a name lookup or connection for anything but loopback
    fails at once and is recorded in the returned list: a test that checks a decision about
    a foreign address shows it was taken without trying that address."""
    tried: list[str] = []
    lookup, connect = socket.getaddrinfo, socket.socket.connect

    def local(host: object) -> bool:
        return str(host) in ("localhost", "::1") or str(host).startswith("127.")

    def guarded_lookup(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host is None or local(host):
            return lookup(host, *args, **kwargs)
        tried.append(str(host))
        raise socket.gaierror(socket.EAI_NONAME, f"the tests look up no outside name: {host}")

    def guarded_connect(sock: socket.socket, address: Any) -> None:
        host = address[0] if isinstance(address, tuple) else address
        if sock.family == socket.AF_UNIX or local(host):
            connect(sock, address)
            return
        tried.append(str(host))
        raise ConnectionRefusedError(f"the tests connect to no outside address: {host}")

    monkeypatch.setattr(socket, "getaddrinfo", guarded_lookup)
    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    return tried


def reach_code(targets: list[tuple[str, int]]) -> str:
    """Sandbox code that tries each of the test's listeners, then reads (without sending
    anything) whether any route leaves the sandbox: a default route, or one to any of its
    DNS servers. Prints one JSON object."""
    return REACH.replace("TARGETS", repr(json.dumps(targets)))


REACH = r"""
import errno, json, socket, struct
outcomes = {}
for host, port in json.loads(TARGETS):
    try:
        socket.create_connection((host, port), timeout=3).close()
        outcomes[host] = 'connected'
    except OSError as e:
        outcomes[host] = errno.errorcode.get(e.errno or 0, str(e))
routes = []
try:
    for line in open('/proc/net/route').read().splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8:
            routes.append((int(fields[1], 16), int(fields[7], 16)))
except OSError:
    pass
def routed(address):
    value = struct.unpack('=I', socket.inet_aton(address))[0]
    return any(value & mask == destination for destination, mask in routes)
servers = []
try:
    for line in open('/etc/resolv.conf'):
        parts = line.split()
        if len(parts) >= 2 and parts[0] == 'nameserver' and '.' in parts[1]:
            servers.append(parts[1])
except OSError:
    pass
print(json.dumps({
    'outcomes': outcomes,
    'default_route': any(mask == 0 for _, mask in routes),
    'routed_dns_servers': [s for s in servers if routed(s)],
}))
"""
