"""Secrets the sandbox never holds: the proxy adds a host's headers inside the TLS it
terminates for that host only, for the channels named, and nowhere else: not to another
host, not across a redirect, not to another channel, not in its log. The API is an HTTPS
listener with its own CA inside a network namespace the test creates."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from bench.standins.netns import namespace
from bench.standins.tls_api import Api, serving_api
from egressproxy import Door, Grants, StaticOwners, StaticResolver
from egressproxy.grants import BadDoor
from egressproxy.secrets import Secrets
from egressproxy.server import EgressProxy

pytestmark = pytest.mark.netns

API, OTHER = "api.example.test", "other.example.test"
TOKEN = "Bearer s3cret-token-for-the-api"  # noqa: S105 - the test's own secret
CHANNEL = "slack:T1:C1"
OWNER, STRANGER = f"{CHANNEL}:1700000000.000100", "slack:T1:C2:1700000000.000200"
TIMEOUT_S = 15


@asynccontextmanager
async def proxy_and_api(
    tmp_path: Path,
) -> AsyncIterator[tuple[tuple[str, int], Api, Path, StaticOwners]]:
    secrets = Secrets.parse(
        [{"host": API, "channels": [CHANNEL], "headers": {"Authorization": TOKEN}}]
    )
    async with namespace() as space, serving_api(space, tmp_path, [API, OTHER]) as api:
        resolver = StaticResolver({API: [space.address], OTHER: [space.address]})
        doors = (Door.parse(API), Door.parse(OTHER))
        owners = StaticOwners()
        proxy = EgressProxy(
            owners,
            resolver,
            secrets=secrets,
            confdir=tmp_path / "ca",
            upstream_ca=api.ca,
        )
        async with proxy:
            address = await proxy.start("127.0.0.1", 0)
            # Both "sandboxes" are this host's loopback: the owner is set per test step.
            owners.set("127.0.0.1", Grants(OWNER, channel=doors))
            yield address, api, tmp_path, owners
            owners.drop("127.0.0.1")


def client_context(tmp_path: Path, api: Api) -> ssl.SSLContext:
    """What a sandbox trusts: the installation's CA (for the tunnels the proxy terminates)
    and, for this test's API, its CA (for tunnels the proxy leaves alone)."""
    context = ssl.create_default_context(cafile=str(tmp_path / "ca" / "mitmproxy-ca-cert.pem"))
    context.load_verify_locations(cafile=str(api.ca))
    return context


async def https_get(
    proxy: tuple[str, int], host: str, path: str, context: ssl.SSLContext, sent: str = ""
) -> tuple[int, bytes]:
    """A GET through a CONNECT tunnel, with TLS end to end as the client sees it."""
    async with asyncio.timeout(TIMEOUT_S):
        reader, writer = await asyncio.open_connection(*proxy)
        try:
            writer.write(f"CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n\r\n".encode())
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ")[1])
            if status != 200:
                return status, head
            await writer.start_tls(context, server_hostname=host)
            extra = f"Authorization: {sent}\r\n" if sent else ""
            writer.write(
                f"GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n".encode()
            )
            await writer.drain()
            answer = await reader.read()
            return int(answer.split(b" ")[1]), answer
        finally:
            # Closed whatever happened (a refused handshake included): nothing is left for
            # the collector to find in a later test.
            writer.close()
            with contextlib.suppress(OSError, ssl.SSLError):
                await writer.wait_closed()


async def test_the_secret_reaches_its_host_and_no_other_and_never_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="egressproxy.audit")
    async with proxy_and_api(tmp_path) as (proxy, api, folder, _):
        context = client_context(folder, api)
        # Its host: the header is added (and replaces one the sandbox sends).
        assert (await https_get(proxy, API, "/data", context))[0] == 200
        assert (await https_get(proxy, API, "/data", context, sent="Bearer forged"))[0] == 200
        # Another host on the same address: no header.
        assert (await https_get(proxy, OTHER, "/data", context))[0] == 200
        # A redirect from its host to another: the next request goes without it.
        status, answer = await https_get(
            proxy, API, f"/redirect?to=https://{OTHER}/landed", context
        )
        assert status == 302
        assert f"https://{OTHER}/landed".encode() in answer
        assert (await https_get(proxy, OTHER, "/landed", context))[0] == 200
        seen = await api.wait_for(5)
    by_line = [(s["host"], s["line"].split()[1], s["authorization"]) for s in seen]
    assert by_line == [
        (API, "/data", TOKEN),
        (API, "/data", TOKEN),
        (OTHER, "/data", None),
        (API, f"/redirect?to=https://{OTHER}/landed", TOKEN),
        (OTHER, "/landed", None),
    ]
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert json.loads(caplog.records[0].getMessage())["event"] == "egress"
    assert "s3cret" not in logged


async def test_another_channel_gets_no_secret_and_its_tunnel_stays_opaque(tmp_path: Path) -> None:
    async with proxy_and_api(tmp_path) as (proxy, api, folder, owners):
        # The same address now belongs to a conversation of another channel.
        owners.set("127.0.0.1", Grants(STRANGER, channel=(Door.parse(API),)))
        only_the_api_ca = ssl.create_default_context(cafile=str(api.ca))
        assert (await https_get(proxy, API, "/data", only_the_api_ca))[0] == 200
        installation = str(folder / "ca" / "mitmproxy-ca-cert.pem")
        only_the_installation_ca = ssl.create_default_context(cafile=installation)
        with pytest.raises(ssl.SSLError):  # the tunnel is the API's own TLS, not the proxy's
            await https_get(proxy, API, "/data", only_the_installation_ca)
        seen = await api.wait_for(1)
    assert [s["authorization"] for s in seen] == [None]


def test_a_secrets_file_is_checked_and_never_quotes_the_secret() -> None:
    bad = [
        ([{"host": "*.example.com", "headers": {"A": "b"}}], "one exact name"),
        ([{"host": "10.0.0.1", "headers": {"A": "b"}}], "one exact name"),
        ([{"host": API, "headers": {}}], "at least one header"),
        ([{"host": API, "headers": {"Bad Name": TOKEN}}], "is not a header name"),
        ([{"host": API, "headers": {"Authorization": TOKEN + "\r\nX: y"}}], "one line"),
        ([{"host": API, "port": 0, "headers": {"A": "b"}}], "port"),
        ([{"host": API, "channels": ["C1"], "headers": {"A": "b"}}], "platform:workspace"),
        ([{"host": API, "headers": {"A": "b"}, "extra": 1}], "only host, port"),
        ({"host": API}, "a list of entries"),
    ]
    for data, message in bad:
        with pytest.raises(BadDoor, match=message) as raised:
            Secrets.parse(data)
        assert "s3cret" not in str(raised.value)
    found = Secrets.parse([{"host": API.upper(), "headers": {"X-Api-Key": "k"}}])
    assert found.for_request("discord:1:2:3", API, 443) == (("X-Api-Key", "k"),)
    assert found.for_request("discord:1:2:3", API, 8443) == ()
    assert found.for_request("discord:1:2:3", OTHER, 443) == ()


async def test_a_request_inside_the_secret_tunnel_cannot_name_another_host(tmp_path: Path) -> None:
    """Absolute-form and a foreign Host inside the terminated tunnel: the secret's header
    never travels to the other name (its connection was never decided, so it is refused)."""
    async with proxy_and_api(tmp_path) as (proxy, api, folder, _):
        context = client_context(folder, api)
        await https_get(proxy, API, f"https://{OTHER}/absolute", context)
        await https_get(proxy, API, "/plain", context)
        seen = await api.wait_for(1)
    for request in seen:
        if request["authorization"] == TOKEN:
            assert request["host"] == API, request
    assert all(OTHER not in (r["host"] or "") for r in seen if r["authorization"])
