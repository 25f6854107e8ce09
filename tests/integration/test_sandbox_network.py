"""The allowlist network (CELLMATE_NETWORK=allowlist) on Docker, under runc and runsc: a
sandbox reaches the egress proxy's address on its network's gateway and nothing else, has no
default route, and gets the proxy's variables; `off` has no route at all and none of them.

The proxy is a stand-in (a tiny HTTP server the test starts on the proxy address). The other
targets are addresses of this host that the test listens on itself: Docker's default bridge
gateway, and the sandbox network's gateway on another port; no other address is tried.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import docker
import docker.errors
import pytest

from bench.standins.ports import free_port
from dockerproxy import DockerProxy, Policy
from executor import Executor, SandboxLimits, Status, default_tag
from executor.docker_backend import DockerBackend
from executor.egress import PACKAGES_DIR, NetworkInfo, bridge_name, network_name
from executor.errors import SandboxError
from tests.integration.conftest import NO_POOL
from tests.support.sandboxes import TEST_INSTANCE

pytestmark = pytest.mark.docker

GUARD = Path(__file__).resolve().parents[2] / "scripts" / "guard-sandbox-network.sh"
ANSWER = b"through the door"
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
PROXY_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "NO_PROXY", "PIP_INDEX_URL")


@dataclass
class Door:
    """The stand-in proxy and the other listeners, and every peer that reached each."""

    network: NetworkInfo
    proxy: tuple[str, int]
    others: list[tuple[str, int]]
    link_local: tuple[str, int] | None = None
    """The bridge's IPv6 link-local address on the host, listened on, if it has one."""
    requests: list[bytes] = field(default_factory=list)
    reached: dict[tuple[str, int], list[str]] = field(default_factory=dict)


def _link_local(interface: str) -> str | None:
    """The interface's IPv6 link-local address on this host (from /proc/net/if_inet6)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/net/if_inet6").read_text().splitlines():
            digits, _, _, scope, _, name = line.split()
            if name == interface and scope == "20":
                return ":".join(digits[i : i + 4] for i in range(0, 32, 4))
    return None


def _docker0_gateway(client: docker.DockerClient) -> str:
    """The default bridge's IPv4 address. An engine that found its bridge already up when it
    started lists the subnet without a gateway: then the interface itself says."""
    network = client.api.inspect_network("bridge")
    for config in network["IPAM"]["Config"] or []:
        if "." in config.get("Gateway", ""):
            return str(config["Gateway"])
    interface = (network.get("Options") or {}).get("com.docker.network.bridge.name", "docker0")
    shown = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "dev", interface],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return shown[shown.index("inet") + 1].split("/")[0]


def _ipv6_socket(address: tuple[str, int, int, int]) -> socket.socket:
    sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    sock.bind(address)
    sock.listen()
    return sock


async def guard(action: str, port: int) -> None:
    """The host rules of scripts/guard-sandbox-network.sh, for this test's bridge only."""
    command = [str(GUARD), action, str(port), bridge_name(TEST_INSTANCE)]
    await asyncio.to_thread(subprocess.run, command, check=True)


@asynccontextmanager
async def door(backend: DockerBackend, client: docker.DockerClient) -> AsyncIterator[Door]:
    """The sandbox network with the stand-in proxy on its gateway, a listener on another port
    of that gateway and one on Docker's default bridge gateway, and the host rules that keep
    the network to the proxy's port (for this network's bridge only)."""
    egress = await backend.egress_network(3128)
    info = await egress.ensure()
    servers: list[asyncio.Server] = []
    found: Door | None = None
    guarded = False

    writers: set[asyncio.StreamWriter] = set()

    def serving(address: list[tuple[str, int]]) -> Handler:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            # Every connection is closed here or on teardown, even one the test ends in the
            # middle of: an unclosed one would warn in whichever test the collector runs in.
            writers.add(writer)
            try:
                assert found is not None
                peer = str(writer.get_extra_info("peername"))
                found.reached.setdefault(address[0], []).append(peer)
                with contextlib.suppress(OSError, asyncio.IncompleteReadError, TimeoutError):
                    async with asyncio.timeout(10):
                        head = await reader.readuntil(b"\r\n\r\n")
                    found.requests.append(head)
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                        % (len(ANSWER), ANSWER)
                    )
                    await writer.drain()
            finally:
                writers.discard(writer)
                writer.close()

        return serve

    try:
        addresses: list[tuple[str, int]] = []
        for host in (info.gateway, info.gateway, _docker0_gateway(client)):
            slot: list[tuple[str, int]] = []
            server = await asyncio.start_server(serving(slot), host, 0)
            servers.append(server)
            slot.append((host, int(server.sockets[0].getsockname()[1])))
            addresses.append(slot[0])
        found = Door(info, addresses[0], addresses[1:])
        if (address := _link_local(bridge_name(TEST_INSTANCE))) is not None:
            slot = []
            scope = socket.if_nametoindex(bridge_name(TEST_INSTANCE))
            server = await asyncio.start_server(
                serving(slot), sock=_ipv6_socket((address, 0, 0, scope))
            )
            servers.append(server)
            slot.append((address, int(server.sockets[0].getsockname()[1])))
            found.link_local = slot[0]
        await guard("add", found.proxy[1])
        guarded = True
        yield found
    finally:
        if guarded:
            await guard("remove", 0)
        for server in servers:
            server.close()
            await server.wait_closed()
        for writer in list(writers):
            writer.close()
        with contextlib.suppress(docker.errors.NotFound):
            client.api.remove_network(network_name(TEST_INSTANCE))


@asynccontextmanager
async def allowlist_executor(
    runtime: str, client: docker.DockerClient, **limits: object
) -> AsyncIterator[tuple[Executor, Door]]:
    backend = DockerBackend(default_tag(), instance=TEST_INSTANCE)
    async with door(backend, client) as opened:
        settings = SandboxLimits(
            runtime=runtime,  # type: ignore[arg-type]
            egress="allowlist",
            proxy_port=opened.proxy[1],
            timeout_s=30,
            **limits,  # type: ignore[arg-type]
        )
        async with Executor(
            default_tag(), limits=settings, backend=backend, instance=TEST_INSTANCE, pool=NO_POOL
        ) as executor:
            yield executor, opened


REACH = r"""
import errno, json, socket, struct
outcomes = {}
for host, port in json.loads(TARGETS):
    try:
        socket.create_connection((host, port), timeout=3).close()
        outcomes[f'{host}:{port}'] = 'connected'
    except OSError as e:
        outcomes[f'{host}:{port}'] = errno.errorcode.get(e.errno or 0, str(e))
routes = []
for line in open('/proc/net/route').read().splitlines()[1:]:
    fields = line.split()
    if len(fields) >= 8:
        gateway = socket.inet_ntoa(struct.pack('=I', int(fields[2], 16)))
        routes.append({'mask': fields[7], 'gateway': gateway})
print(json.dumps({'outcomes': outcomes, 'routes': routes}))
"""


def reach_code(targets: list[tuple[str, int]]) -> str:
    """Sandbox code that tries each of the test's listeners and reads (without sending
    anything) the sandbox's routes: each one's mask and next hop."""
    return REACH.replace("TARGETS", repr(json.dumps(targets)))


def key(address: tuple[str, int]) -> str:
    return f"{address[0]}:{address[1]}"


ENVIRONMENT = f"""
import json, os
print(json.dumps({{name: os.environ.get(name) for name in {PROXY_ENV!r}}}))
"""

FETCH = """
import urllib.request
# The name is never resolved in the sandbox: the request goes to the proxy as it is.
print(urllib.request.urlopen('http://files.example/data.csv', timeout=10).read().decode())
"""


async def test_an_allowlist_sandbox_reaches_only_the_proxy(
    runtime: str, docker_client: docker.DockerClient
) -> None:
    async with allowlist_executor(runtime, docker_client) as (executor, opened):
        targets = [opened.proxy, *opened.others]
        reach = await executor.run_notebook(reach_code(targets))
        fetched = await executor.run_notebook(FETCH)
        env = await executor.run_notebook(ENVIRONMENT)
    assert reach.status is Status.OK, reach.message
    seen = json.loads(reach.stdout)
    assert seen["outcomes"][key(opened.proxy)] == "connected", seen
    for other in opened.others:
        assert seen["outcomes"][key(other)] != "connected", seen
    assert set(opened.reached) == {opened.proxy}
    # Whatever the routing table says (Docker 20.10 still gives an internal network a
    # default route), its only next hop is the host, the network's gateway, where nothing
    # but the proxy's port answers and from which the engine forwards nothing.
    on_link = "0.0.0.0"  # noqa: S104 (a route without a next hop, not an address to bind)
    assert {route["gateway"] for route in seen["routes"]} <= {on_link, opened.network.gateway}
    # What code sees: plain HTTP through the proxy, the URL asked for in the request line.
    assert fetched.status is Status.OK, fetched.message
    assert fetched.stdout.strip() == ANSWER.decode()
    assert any(r.startswith(b"GET http://files.example/data.csv HTTP/1.1") for r in opened.requests)
    proxy = f"http://{opened.proxy[0]}:{opened.proxy[1]}"
    assert json.loads(env.stdout) == {
        "HTTP_PROXY": proxy,
        "HTTPS_PROXY": proxy,
        "http_proxy": proxy,
        "https_proxy": proxy,
        "NO_PROXY": "localhost,127.0.0.1,::1",
        "PIP_INDEX_URL": "https://pypi.org/simple",
    }


# Ways around the proxy's port that the host's rules and the network must refuse: UDP and
# other ports of the gateway, the sandbox's neighbours, and the bridge's IPv6 link-local side.
AROUND = """
import errno, json, socket
gateway, port = GATEWAY
out = {}
for p in (22, 80, 2375, 8080, port + 1):
    try:
        socket.create_connection((gateway, p), timeout=2).close()
        out[f'tcp {p}'] = 'connected'
    except OSError as e:
        out[f'tcp {p}'] = errno.errorcode.get(e.errno or 0, str(e))
if LINK_LOCAL:
    try:
        s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        s.settimeout(2)
        s.connect((*LINK_LOCAL, 0, socket.if_nametoindex('eth0')))
        out['ipv6'] = 'connected'
    except OSError as e:
        out['ipv6'] = errno.errorcode.get(e.errno or 0, str(e))
print(json.dumps(out))
"""


async def test_no_other_door_of_the_host_opens(
    runtime: str, docker_client: docker.DockerClient
) -> None:
    async with allowlist_executor(runtime, docker_client) as (executor, opened):
        code = AROUND.replace("GATEWAY", repr(list(opened.proxy)))
        code = code.replace("LINK_LOCAL", repr(opened.link_local))
        result = await executor.run_notebook(code)
    assert result.status is Status.OK, result.message
    assert "connected" not in json.loads(result.stdout).values(), result.stdout
    assert set(opened.reached) <= {opened.proxy}


async def test_off_has_no_route_and_no_proxy(
    runtime: str, docker_client: docker.DockerClient
) -> None:
    backend = DockerBackend(default_tag(), instance=TEST_INSTANCE)
    async with door(backend, docker_client) as opened:
        limits = SandboxLimits(runtime=runtime, timeout_s=30)  # type: ignore[arg-type]
        async with Executor(
            default_tag(), limits=limits, backend=backend, instance=TEST_INSTANCE, pool=NO_POOL
        ) as executor:
            reach = await executor.run_notebook(reach_code([opened.proxy, *opened.others]))
            env = await executor.run_notebook(ENVIRONMENT)
            routes = await executor.run_notebook("print(open('/proc/net/route').read())")
    seen = json.loads(reach.stdout)
    assert "connected" not in seen["outcomes"].values(), seen
    assert opened.reached == {}
    assert seen["routes"] == []
    assert json.loads(env.stdout) == dict.fromkeys(PROXY_ENV)
    assert routes.stdout.strip().splitlines()[1:] == []  # no route at all, not even a subnet


PACKAGE = f"""
import os, subprocess, sys
root = {PACKAGES_DIR!r}
os.makedirs(f'{{root}}/tinypkg', exist_ok=True)
with open(f'{{root}}/tinypkg/__init__.py', 'w') as f:
    f.write('ANSWER = 42\\n')
import tinypkg
print('imported', tinypkg.ANSWER, tinypkg.__file__)
for where in (root, '/tmp'):
    path = f'{{where}}/tool'
    with open(path, 'w') as f:
        f.write('#!/bin/sh\\necho ran\\n')
    os.chmod(path, 0o755)
    try:
        print(where, subprocess.run([path], capture_output=True, text=True).stdout.strip())
    except PermissionError:
        print(where, 'not executable')
try:
    with open(f'{{root}}/big', 'wb') as f:
        f.write(b'x' * (40 * 1024 * 1024))
    print('big written')
except OSError as e:
    print('big refused', e.errno)
print('on path', root in sys.path)
"""


async def test_packages_go_to_a_capped_place_that_allows_execution(
    runtime: str, docker_client: docker.DockerClient
) -> None:
    async with allowlist_executor(runtime, docker_client, packages_mb=32) as (executor, _):
        result = await executor.run_notebook(PACKAGE)
        gone = await executor.run_notebook(
            "import os; print(os.path.exists('/opt/cellmate-packages/tinypkg'))"
        )
    assert result.status is Status.OK, result.message
    lines = result.stdout.splitlines()
    assert lines[0] == f"imported 42 {PACKAGES_DIR}/tinypkg/__init__.py"
    assert f"{PACKAGES_DIR} ran" in lines
    assert "/tmp not executable" in lines
    assert "big refused 28" in lines  # ENOSPC: the place is capped
    assert "on path True" in lines
    assert gone.stdout == "False\n"  # a new sandbox starts with an empty place


async def test_off_has_no_packages_place(runtime: str) -> None:
    limits = SandboxLimits(runtime=runtime, timeout_s=30)  # type: ignore[arg-type]
    async with Executor(default_tag(), limits=limits, instance=TEST_INSTANCE, pool=NO_POOL) as ex:
        result = await ex.run_notebook(
            f"import os\ntry:\n    os.makedirs({PACKAGES_DIR!r})\nexcept OSError as e:\n"
            "    print('refused', e.errno)"
        )
    assert result.stdout.startswith("refused"), result.stdout


@asynccontextmanager
async def docker_api_proxy(policy: Policy) -> AsyncIterator[str]:
    """The Docker API proxy in front of the engine, as DOCKER_HOST."""
    proxy = DockerProxy("/var/run/docker.sock", policy)
    port = free_port()
    server = await proxy.start("127.0.0.1", port)
    try:
        yield f"tcp://127.0.0.1:{port}"
    finally:
        server.close()
        await server.wait_closed()
        await proxy.close()


async def test_the_docker_api_proxy_lets_sandboxes_join_only_when_told(
    runtime: str, docker_client: docker.DockerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    setup = DockerBackend(default_tag(), instance=TEST_INSTANCE)
    async with door(setup, docker_client) as opened:
        limits = SandboxLimits(
            runtime=runtime,  # type: ignore[arg-type]
            egress="allowlist",
            proxy_port=opened.proxy[1],
            timeout_s=30,
        )
        allowed = Policy(
            instance=TEST_INSTANCE, egress_network=True, egress_proxy_port=opened.proxy[1]
        )
        async with docker_api_proxy(allowed) as url:
            monkeypatch.setenv("DOCKER_HOST", url)
            async with Executor(
                default_tag(), limits=limits, instance=TEST_INSTANCE, pool=NO_POOL
            ) as executor:
                fetched = await executor.run_notebook(FETCH)
        async with docker_api_proxy(Policy(instance=TEST_INSTANCE)) as url:
            monkeypatch.setenv("DOCKER_HOST", url)
            async with Executor(
                default_tag(), limits=limits, instance=TEST_INSTANCE, pool=NO_POOL
            ) as executor:
                with pytest.raises(SandboxError) as refused:
                    await executor.run_notebook(FETCH)
        await setup.close()
    assert fetched.status is Status.OK, fetched.message
    assert fetched.stdout.strip() == ANSWER.decode()
    assert "no sandbox network" in str(refused.value)
