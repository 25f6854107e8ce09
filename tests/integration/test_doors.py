"""The network's doors end to end, under runc and runsc: the console, the bot's conversation
layer, the real egress proxy (its own process, started and asked by the bot), and a sandbox on
the allowlist network fetching from a listener inside a network namespace the test creates.

A closed door fails the fetch with the proxy's reason, says so on the run's result, and asks
the console's approver; *Allow once* runs the cell again through the door, and the next run
finds it closed. Loopback, in every spelling, is refused whatever is granted, and the test's
own loopback listener records no hit.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from bench.standins.doors import FixedDoors, guarded_network
from bench.standins.netns import Listener, listening_in, namespace
from bench.standins.openai_server import ScriptedModel
from bench.standins.tls_api import serving_api
from bot.agent import Agent
from bot.conversations import Conversations
from bot.conversations.keys import ConversationKey
from bot.conversations.network import NetworkGrants, NetworkSettings
from bot.database import Databases
from bot.ops.egress_link import EgressLink, start_egress
from bot.platforms.console import DOOR_PROMPT, Console
from egressproxy.ca import installation_ca
from executor import Executor, SandboxLimits, Status, default_tag
from executor.docker_backend import DockerBackend
from executor.egress import DEFAULT_PROXY_PORT
from tests.fast.test_console_turns import Chat
from tests.integration.conftest import NO_POOL
from tests.support.agents import clients, make_agent, model
from tests.support.sandboxes import TEST_INSTANCE

__all__ = ["clients", "make_agent", "model"]

pytestmark = [pytest.mark.docker, pytest.mark.netns]

GUARD = Path(__file__).resolve().parents[2] / "scripts" / "guard-sandbox-network.sh"

FETCH = """
import urllib.request, urllib.error
try:
    with urllib.request.urlopen('URL', timeout=20) as answer:
        print('fetched', answer.status, len(answer.read()))
except urllib.error.HTTPError as refusal:
    print('refused', refusal.code, refusal.read().decode().strip())
"""

ASK_PROXY = """
import http.client, os, urllib.parse
# Straight to the proxy, whatever NO_PROXY says: the proxy is what must refuse.
proxy = urllib.parse.urlsplit(os.environ['HTTP_PROXY'])
connection = http.client.HTTPConnection(proxy.hostname, proxy.port, timeout=20)
connection.request('GET', 'URL')
answer = connection.getresponse()
body = answer.read()
if answer.status == 200:
    print('fetched', answer.status, len(body))
else:
    print('refused', answer.status, body.decode().strip())
"""

TUNNEL = """
import http.client, os, urllib.parse
proxy = urllib.parse.urlsplit(os.environ['HTTPS_PROXY'])
connection = http.client.HTTPConnection(proxy.hostname, proxy.port, timeout=20)
connection.set_tunnel('HOST', PORT)
try:
    connection.request('GET', '/through-the-tunnel')
    answer = connection.getresponse()
    print('tunnel', answer.status, len(answer.read()))
except OSError as refusal:
    print('tunnel refused', refusal)
"""


def fetch(url: str) -> str:
    return f"```python\n{FETCH.replace('URL', url)}\n```"


def ask_proxy(url: str) -> str:
    return f"```python\n{ASK_PROXY.replace('URL', url)}\n```"


def tunnel(host: str, port: int) -> str:
    return f"```python\n{TUNNEL.replace('HOST', host).replace('PORT', str(port))}\n```"


@asynccontextmanager
async def doors(runtime: str, **more: str) -> AsyncIterator[Executor]:
    """An allowlist executor of the test's instance, with the host rules that keep its bridge
    to the proxy's port; its network removed afterwards."""
    limits = SandboxLimits(runtime=runtime, egress="allowlist", timeout_s=60, **more)  # type: ignore[arg-type]
    backend = DockerBackend(default_tag(), instance=TEST_INSTANCE)
    async with (
        guarded_network(TEST_INSTANCE, DEFAULT_PROXY_PORT),
        Executor(
            default_tag(), limits=limits, backend=backend, instance=TEST_INSTANCE, pool=NO_POOL
        ) as executor,
    ):
        yield executor


@pytest.fixture
async def outside() -> AsyncIterator[Listener]:
    async with namespace() as space, listening_in(space) as listener:
        yield listener


@pytest.fixture
def loopback_hits() -> Iterator[tuple[int, list[bytes]]]:
    """A listener of the test's on this host's loopback, and what reached it."""
    import socket
    import threading

    hits: list[bytes] = []
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError, OSError):
                peer, _ = server.accept()
                hits.append(peer.recv(4096))
                peer.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], hits
    finally:
        stop.set()
        thread.join()
        server.close()


@pytest.fixture
async def console(
    runtime: str,
    make_agent: Callable[..., Agent],
    model: ScriptedModel,
    tmp_path: Path,
) -> AsyncIterator[tuple[Chat, EgressLink]]:
    async with doors(runtime) as executor:
        agent = make_agent(executor, model, tmp_path, timeout=60)
        network = NetworkGrants(Databases.sqlite(tmp_path), NetworkSettings(mode="allowlist"))
        conversations = Conversations(agent, network=network)
        link = await start_egress(executor, conversations, DEFAULT_PROXY_PORT, "")
        agent.refusals = link.take_notes
        chat = Chat(agent, tmp_path)
        chat.console = Console(conversations, chat.out, tmp_path / "exports")
        try:
            yield chat, link
        finally:
            await link.close()
            network.close()


async def test_a_closed_door_is_asked_about_and_allow_once_opens_it_for_one_run(
    console: tuple[Chat, EgressLink], outside: Listener
) -> None:
    chat, _ = console
    door = f"{outside.address}:{outside.port}"
    cell = fetch(f"http://{door}/data.csv")

    out = await chat.pipe(cell, "o")
    asked = out.index(DOOR_PROMPT)
    assert f"refused 403 {door} is not open to this channel" in out[:asked]
    assert f"The network refused this run: {door} is not open to this channel." in out[:asked]
    assert f"The code here tried to reach {door}" in out[:asked]
    assert f"✅ {door} allowed for the next run by you; the code runs again." in out
    assert "fetched 200 1000" in out[asked:]
    hits = await outside.wait_for(1)
    assert hits[0]["line"] == "GET /data.csv HTTP/1.1"

    out = await chat.pipe(cell, "n")
    assert f"refused 403 {door} is not open to this channel" in out
    assert f"🚫 {door} stays closed (denied by you)." in out
    assert "fetched 200" not in out
    assert len(outside.hits) == 1


async def test_a_channel_grant_opens_plain_requests_and_tunnels_and_usage_counts_them(
    console: tuple[Chat, EgressLink], outside: Listener
) -> None:
    chat, link = console
    conversations = link.doors
    assert isinstance(conversations, Conversations)
    door = f"{outside.address}:{outside.port}"
    out = await chat.pipe(
        f"/network allow {door} channel",
        fetch(f"http://{door}/plain"),
        tunnel(outside.address, outside.port),
    )
    assert f"{outside.address} (port {outside.port}) is now open in this channel." in out
    assert "fetched 200 1000" in out
    assert "tunnel 200 1000" in out
    assert DOOR_PROMPT not in out
    hits = await outside.wait_for(2)
    assert sorted(hit["line"] for hit in hits) == [
        "GET /plain HTTP/1.1",
        "GET /through-the-tunnel HTTP/1.1",
    ]
    # The proxy reports a connection's traffic once it closes, which may be after the
    # listener saw the request.
    usage = conversations.usage(None)
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(10):
            while f"{door} allowed: 2 requests" not in usage:
                await asyncio.sleep(0.05)
                usage = conversations.usage(None)
    assert f"{door} allowed: 2 requests" in usage, usage


async def test_loopback_is_refused_in_every_spelling_whatever_is_granted(
    console: tuple[Chat, EgressLink], loopback_hits: tuple[int, list[bytes]]
) -> None:
    chat, _ = console
    port, hits = loopback_hits
    spellings = ["127.0.0.1", "localhost", "2130706433", "0x7f000001", "127.1", "[::1]"]
    for host in ("127.0.0.1", "localhost"):
        await chat.pipe(f"/network allow {host}:{port} channel")
    out = await chat.pipe(*(ask_proxy(f"http://{host}:{port}/secret") for host in spellings))
    assert out.count("refused 403") == len(spellings), out
    assert "fetched 200" not in out
    assert DOOR_PROMPT not in out  # no grant could open these: nobody is asked
    assert hits == []


USE_THE_API = """
import os, pathlib, urllib.request
with urllib.request.urlopen('https://API/data', timeout=20) as answer:
    print('api says', answer.status, answer.read().decode())
places = [pathlib.Path('/proc/self/environ'), *pathlib.Path('/tmp').rglob('*'),
          *pathlib.Path('/mnt/data').rglob('*')]
held = [str(p) for p in places if p.is_file() and b'SECRET' in p.read_bytes()]
print('secret held:', held, any('SECRET' in v for v in os.environ.values()))
"""
API = "api.example.test"
TOKEN = "Bearer s3cret-for-the-api"  # noqa: S105 - the test's own secret


async def test_a_secret_reaches_its_api_from_its_channel_only_and_the_sandbox_never_holds_it(
    runtime: str, tmp_path: Path
) -> None:
    channel = ConversationKey("slack", "T1", "C1", "")
    mine, theirs = f"{channel.id}1700000000.1", "slack:T1:C2:1700000000.2"
    secrets = tmp_path / "secrets.json"
    secrets.write_text(
        json.dumps(
            [{"host": API, "channels": [channel.id[:-1]], "headers": {"Authorization": TOKEN}}]
        )
    )
    confdir = tmp_path / "egress-ca"
    async with namespace() as space, serving_api(space, tmp_path, [API]) as api:
        limits = {"trusted_ca": installation_ca(confdir)}
        async with doors(runtime, **limits) as executor:
            link = await start_egress(
                executor,
                FixedDoors(API),
                DEFAULT_PROXY_PORT,
                "",
                [
                    "--secrets", str(secrets), "--confdir", str(confdir),
                    "--upstream-ca", str(api.ca), "--resolve", f"{API}={space.address}",
                ],
            )  # fmt: skip
            try:
                code = USE_THE_API.replace("API", API).replace("SECRET", "s3cret")
                used = await executor.session(mine).run(code)
                other = await executor.session(theirs).run(code)
            finally:
                await link.close()
        seen = await api.wait_for(1)
    assert used.status is Status.OK, used.stderr
    assert used.stdout == "api says 200 ok\nsecret held: [] False\n"
    assert [s["authorization"] for s in seen] == [TOKEN]
    # Another channel's tunnel is the API's own TLS, which sandboxes do not trust.
    assert other.status is Status.ERROR
    assert "CERTIFICATE_VERIFY_FAILED" in other.stderr + str(other.error)
    assert len(api.seen) == 1
    for result in (used, other):
        assert "s3cret" not in result.stdout + result.stderr + result.message
