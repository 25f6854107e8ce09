"""The addon's failure paths, with the proxy on loopback and no target at all: when the bot
cannot say who owns a sandbox, or a connection was never decided, nothing goes out."""

from __future__ import annotations

import asyncio

import pytest
from mitmproxy import connection
from mitmproxy.proxy import server_hooks
from mitmproxy.test import tflow

from egressproxy import REFUSED_HEADER, Audit, Grants, StaticOwners, StaticResolver
from egressproxy import addon as addon_module
from egressproxy.addon import EgressAddon
from egressproxy.audit import UNKNOWN
from egressproxy.grants import doors
from egressproxy.server import EgressProxy


class BrokenOwners:
    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error

    async def grants_for(self, address: str) -> Grants | None:
        if self.error is not None:
            raise self.error
        await asyncio.Event().wait()  # never answers
        return None


async def refused_body(port: int) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 403 "), answer
    assert f"{REFUSED_HEADER}: a.test:80".encode() in answer
    return answer.partition(b"\r\n\r\n")[2]


@pytest.mark.parametrize("error", [RuntimeError("bot down"), ConnectionRefusedError(), None])
async def test_a_bot_that_cannot_answer_refuses_the_request(
    error: BaseException | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    audit = Audit()
    monkeypatch.setattr(addon_module, "OWNERS_TIMEOUT_S", 0.2)
    resolver = StaticResolver({"a.test": ["93.184.216.34"]})
    async with EgressProxy(BrokenOwners(error), resolver, audit) as proxy:
        _, port = await proxy.start("127.0.0.1", 0)
        body = await refused_body(port)
    assert body == b"the proxy could not ask who owns this sandbox\n"
    assert audit.totals(UNKNOWN)["refused"] == 1
    assert resolver.asked == []


def hook_data(
    client: connection.Client, host: str, port: int
) -> server_hooks.ServerConnectionHookData:
    server = connection.Server(address=(host, port))
    return server_hooks.ServerConnectionHookData(server=server, client=client)


def test_a_connection_no_decision_pinned_is_refused() -> None:
    addon = EgressAddon(StaticOwners(), StaticResolver())
    client = connection.Client(peername=("172.30.0.7", 40000), sockname=("172.30.0.1", 3128))
    data = hook_data(client, "a.test", 443)
    addon.server_connect(data)
    assert data.server.error is not None
    assert data.server.address == ("a.test", 443)  # and it was not pointed anywhere


async def test_a_pin_serves_only_its_own_client_and_only_once() -> None:
    owners = StaticOwners({"172.30.0.7": Grants("console:me", channel=doors("a.test"))})
    addon = EgressAddon(owners, StaticResolver({"a.test": ["93.184.216.34"]}))
    mine = connection.Client(peername=("172.30.0.7", 40000), sockname=("172.30.0.1", 3128))
    other = connection.Client(peername=("172.30.0.8", 40000), sockname=("172.30.0.1", 3128))
    flow = tflow.tflow()
    flow.client_conn = mine
    flow.request.host, flow.request.port, flow.request.method = "a.test", 443, "CONNECT"
    await addon.http_connect(flow)
    assert flow.response is None  # allowed
    stolen = hook_data(other, "a.test", 443)
    addon.server_connect(stolen)
    assert stolen.server.error is not None
    used = hook_data(mine, "a.test", 443)
    addon.server_connect(used)
    assert used.server.error is None
    assert used.server.address == ("93.184.216.34", 443)
    again = hook_data(mine, "a.test", 443)
    addon.server_connect(again)
    assert again.server.error is not None
