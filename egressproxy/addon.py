"""The mitmproxy addon that decides every request a sandbox makes, and counts it.

    sandbox --GET http://host/ or CONNECT host:443--> proxy
        who is it? (Owners, by the client's source address)
        is the door open? (decide.admit: no lookup for a door nobody opened)
        resolve the name ONCE, check every answer (decide.decide)
        pin: the server connection goes to the checked address, never to the name
        --> host          or    403 + reason + X-Cellmate-Refused: host:port

The pin is what defeats DNS rebinding: mitmproxy would resolve the name again when it
connects, so `server_connect` rewrites the connection's address to the one that was checked,
and refuses any connection no decision pinned (fail closed). A CONNECT tunnel is relayed as
raw TCP (no TLS interception), decided on its host and port. Redirects are answers like any
other: the client's next request is decided again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from mitmproxy import connection, http, tcp
from mitmproxy.proxy import layers, server_hooks
from mitmproxy.proxy.layer import NextLayer
from mitmproxy.proxy.mode_specs import RegularMode

from egressproxy import REFUSED_HEADER
from egressproxy.audit import UNKNOWN, Audit, Exchange
from egressproxy.decide import Verdict, admit, decide
from egressproxy.grants import Grants, Perimeter
from egressproxy.owners import Owners
from egressproxy.resolve import Resolver
from egressproxy.secrets import Secrets

log = logging.getLogger(__name__)

OWNERS_TIMEOUT_S = 5.0
LOOKUP_TIMEOUT_S = 10.0
HOP_BY_HOP = ("proxy-authorization", "proxy-connection")
"""Meant for the proxy: never passed on to the host."""


@dataclass(frozen=True, slots=True)
class Pin:
    address: str
    exchange: Exchange


def refusal(verdict: Verdict) -> http.Response:
    """What the sandbox sees at a closed door: plain text a person (or the model) reads."""
    return http.Response.make(
        403,
        f"{verdict.reason}\n",
        {"Content-Type": "text/plain; charset=utf-8", REFUSED_HEADER: verdict.target},
    )


def _counter(audit: Audit, exchange: Exchange, up: bool) -> Callable[[bytes], bytes]:
    def count(chunk: bytes) -> bytes:
        audit.add(exchange, up=len(chunk) if up else 0, down=0 if up else len(chunk))
        return chunk

    return count


class EgressAddon:
    """Register with a mitmproxy master in `regular` mode (see `egressproxy.server`)."""

    def __init__(
        self,
        owners: Owners,
        resolver: Resolver,
        audit: Audit | None = None,
        perimeter: Perimeter | None = None,
        secrets: Secrets | None = None,
    ) -> None:
        self.owners = owners
        self.resolver = resolver
        self.audit = audit or Audit()
        self.perimeter = perimeter or Perimeter()
        self.secrets = secrets or Secrets()
        # A tunnel whose TLS the proxy terminates, to add these headers to its requests.
        self._secret_tunnels: dict[str, tuple[tuple[str, str], ...]] = {}
        # (client connection, host, port as mitmproxy will connect) -> the checked address.
        self._pins: dict[tuple[str, str, int], Pin] = {}
        # A client connection that became a CONNECT tunnel -> its exchange.
        self._tunnels: dict[str, Exchange] = {}

    async def _grants(self, client: connection.Client) -> tuple[str, Grants | None, str]:
        address = str(client.peername[0]) if client.peername else ""
        try:
            async with asyncio.timeout(OWNERS_TIMEOUT_S):
                grants = await self.owners.grants_for(address)
        except Exception as exc:  # any failure to ask refuses, and is logged
            log.warning("could not ask who owns %s: %s", address, type(exc).__name__)
            return address, None, "the proxy could not ask who owns this sandbox"
        if grants is None:
            return address, None, "no conversation owns this sandbox"
        return address, grants, ""

    async def _decide(self, flow: http.HTTPFlow, kind: str) -> Verdict | None:
        """Decide the flow's request; on refusal, answer it. Returns the allowing verdict."""
        request = flow.request
        client, grants, why = await self._grants(flow.client_conn)
        if grants is None:
            verdict = Verdict(False, why, request.host, request.port)
            owner = UNKNOWN
        else:
            owner = grants.owner
            verdict = admit(grants, request.host, request.port, self.perimeter)
            if verdict.allowed and verdict.lookup is not None:
                try:
                    async with asyncio.timeout(LOOKUP_TIMEOUT_S):
                        resolved = await self.resolver.resolve(verdict.lookup, request.port)
                except Exception as exc:  # a lookup that fails is a name with no address
                    log.warning("could not resolve %s: %s", verdict.lookup, type(exc).__name__)
                    resolved = []
                verdict = decide(grants, request.host, request.port, resolved, self.perimeter)
        exchange = self.audit.open(
            owner, client, verdict.host, verdict.port, verdict.allowed, kind, verdict.reason
        )
        if not verdict.allowed or verdict.address is None:
            flow.response = refusal(verdict)
            self.audit.close(exchange)
            return None
        flow.metadata["cellmate.exchange"] = exchange
        self._pins[(flow.client_conn.id, request.host, request.port)] = Pin(
            verdict.address, exchange
        )
        return verdict

    # -- plain HTTP through the proxy (GET http://host/ ...) --------------------------------

    async def requestheaders(self, flow: http.HTTPFlow) -> None:
        if flow.request.method == "CONNECT":
            return  # decided in http_connect
        headers = self._secret_tunnels.get(flow.client_conn.id)
        if headers is not None:
            self._inside_secret_tunnel(flow, headers)
            return
        for name in HOP_BY_HOP:
            flow.request.headers.pop(name, None)
        if await self._decide(flow, "http") is not None:
            # Stream both ways: nothing is held in memory, and every byte is counted.
            flow.request.stream = _counter(self.audit, flow.metadata["cellmate.exchange"], True)

    def _inside_secret_tunnel(
        self, flow: http.HTTPFlow, headers: tuple[tuple[str, str], ...]
    ) -> None:
        """A request inside a tunnel decided at its CONNECT, whose server connection is the
        checked address of the host the secret is for: the secret's headers replace any the
        sandbox sent, and only over TLS to that server."""
        exchange = self._tunnels.get(flow.client_conn.id)
        if exchange is None or not flow.server_conn.tls:
            flow.response = http.Response.make(
                403, "the proxy adds this host's credentials over TLS only\n"
            )
            return
        for name in HOP_BY_HOP:
            flow.request.headers.pop(name, None)
        for name, value in headers:
            flow.request.headers[name] = value
        flow.metadata["cellmate.tunnel"] = exchange
        flow.request.stream = _counter(self.audit, exchange, True)

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        tunnel = flow.metadata.get("cellmate.tunnel")
        if isinstance(tunnel, Exchange) and flow.response is not None:
            flow.response.stream = _counter(self.audit, tunnel, False)
            return
        exchange = flow.metadata.get("cellmate.exchange")
        if isinstance(exchange, Exchange) and flow.response is not None:
            flow.response.stream = _counter(self.audit, exchange, False)

    def response(self, flow: http.HTTPFlow) -> None:
        exchange = flow.metadata.get("cellmate.exchange")
        if isinstance(exchange, Exchange):
            self.audit.close(exchange)

    def error(self, flow: http.HTTPFlow) -> None:
        exchange = flow.metadata.get("cellmate.exchange")
        if isinstance(exchange, Exchange):
            self.audit.close(exchange, str(flow.error) if flow.error else "error")

    # -- CONNECT host:port, relayed as TCP ---------------------------------------------------

    async def http_connect(self, flow: http.HTTPFlow) -> None:
        if await self._decide(flow, "connect") is not None:
            exchange = flow.metadata["cellmate.exchange"]
            self._tunnels[flow.client_conn.id] = exchange
            headers = self.secrets.for_request(
                exchange.key.owner, flow.request.host, flow.request.port
            )
            if headers:
                self._secret_tunnels[flow.client_conn.id] = headers

    def next_layer(self, nextlayer: NextLayer) -> None:
        """Inside a CONNECT tunnel: raw TCP, with a flow whose bytes are counted. The first
        layer of a connection (the proxy's own HTTP) is left to mitmproxy."""
        context = nextlayer.context
        if (
            nextlayer.layer is None
            and len(context.layers) > 1
            and isinstance(context.client.proxy_mode, RegularMode)
            and context.client.id not in self._secret_tunnels
        ):
            nextlayer.layer = layers.TCPLayer(context)

    def tcp_message(self, flow: tcp.TCPFlow) -> None:
        exchange = self._tunnels.get(flow.client_conn.id)
        message = flow.messages[-1]
        if exchange is not None:
            size = len(message.content)
            if message.from_client:
                self.audit.add(exchange, up=size)
            else:
                self.audit.add(exchange, down=size)
        # The layer sends the message it holds; the flow need not keep every chunk.
        flow.messages.clear()

    def tcp_end(self, flow: tcp.TCPFlow) -> None:
        if (exchange := self._tunnels.pop(flow.client_conn.id, None)) is not None:
            self.audit.close(exchange)

    def tcp_error(self, flow: tcp.TCPFlow) -> None:
        if (exchange := self._tunnels.pop(flow.client_conn.id, None)) is not None:
            self.audit.close(exchange, str(flow.error) if flow.error else "error")

    # -- every connection out: only to a checked address -------------------------------------

    def server_connect(self, data: server_hooks.ServerConnectionHookData) -> None:
        address = data.server.address
        pin = None
        if address is not None:
            pin = self._pins.pop((data.client.id, str(address[0]), int(address[1])), None)
        if pin is None:
            # Nothing decided this connection: mitmproxy would resolve and connect on its own.
            data.server.error = "refused: no decision for this connection"
            return
        data.server.address = (pin.address, int(address[1]))  # type: ignore[index]

    def client_disconnected(self, client: connection.Client) -> None:
        self._secret_tunnels.pop(client.id, None)
        for key in [key for key in self._pins if key[0] == client.id]:
            del self._pins[key]
        if (exchange := self._tunnels.pop(client.id, None)) is not None:
            self.audit.close(exchange)
