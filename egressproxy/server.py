"""The proxy as a running server: mitmproxy's master, with only the addons the job needs.

mitmproxy's default addon set is a debugging tool's (an onboarding web app, scripts, replay,
header rewriting); none of it is loaded. What runs is its proxy server and layer choice, and
`EgressAddon`. mitmproxy keeps one master per process (its `ctx` is global) and runs tasks
eagerly while it serves, so production runs it as a process of its own:
`cellmate egress-proxy` (see `egressproxy.cli`).

    async with EgressProxy(owners, resolver) as proxy:
        host, port = await proxy.start("127.0.0.1", 0)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
import time
from pathlib import Path
from types import TracebackType

from mitmproxy import options
from mitmproxy.addons import core, next_layer, proxyserver, tlsconfig
from mitmproxy.master import Master

from egressproxy.addon import EgressAddon
from egressproxy.audit import Audit
from egressproxy.grants import Perimeter
from egressproxy.owners import Owners
from egressproxy.resolve import Resolver, SystemResolver
from egressproxy.secrets import Secrets

log = logging.getLogger(__name__)

START_TIMEOUT_S = 15.0
DRAIN_S = 5.0


class ProxyFailed(RuntimeError):
    """The proxy could not start listening (the address is taken, or not this host's)."""


class EgressProxy:
    def __init__(
        self,
        owners: Owners,
        resolver: Resolver | None = None,
        audit: Audit | None = None,
        perimeter: Perimeter | None = None,
        secrets: Secrets | None = None,
        confdir: Path | None = None,
        upstream_ca: Path | None = None,
    ) -> None:
        self.audit = audit or Audit()
        self.addon = EgressAddon(
            owners, resolver or SystemResolver(), self.audit, perimeter, secrets
        )
        self.confdir = confdir
        """Where the CA lives that the proxy terminates TLS with (for secrets); made there
        when missing. None: mitmproxy's default (~/.mitmproxy)."""
        self.upstream_ca = upstream_ca
        """CA certificates the hosts' TLS is verified with, besides the usual ones."""
        self._master: Master | None = None
        self._own_confdir: Path | None = None
        self._server: proxyserver.Proxyserver | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen on `host:port` (0: any free port); returns the address it listens on."""
        opts = options.Options()
        if self.confdir is None:
            # mitmproxy makes a CA in its confdir whatever it terminates: without secrets,
            # a throwaway one in a private folder, never the home folder (read-only, or the
            # bot's).
            self._own_confdir = Path(tempfile.mkdtemp(prefix="cellmate-egress-"))
        opts.update(confdir=str(self.confdir or self._own_confdir))
        if self.upstream_ca is not None:
            opts.update(ssl_verify_upstream_trusted_ca=str(self.upstream_ca))
        master = Master(opts)
        server = proxyserver.Proxyserver()
        # The egress addon first: it chooses a tunnel's layer before mitmproxy's default would.
        # tlsconfig: certificates for the TLS the proxy terminates (tunnels with secrets only).
        master.addons.add(
            core.Core(), server, self.addon, next_layer.NextLayer(), tlsconfig.TlsConfig()
        )
        opts.update(
            mode=["regular"],
            listen_host=host,
            listen_port=port,
            # Open the connection to the checked address before answering CONNECT, so a
            # failure is an answer the client sees, not a tunnel that closes.
            connection_strategy="eager",
            ignore_hosts=[],
            tcp_hosts=[],
            rawtcp=False,
            # Keep what the sandbox sent: the host sees the request as written.
            normalize_outbound_headers=False,
            validate_inbound_headers=True,
        )
        self._master, self._server = master, server
        self._task = asyncio.create_task(master.run(), name="egress proxy")
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (found := server.listen_addrs()):
            if self._task.done() or time.monotonic() > deadline:
                await self.close()
                raise ProxyFailed(f"the egress proxy could not listen on {host}:{port}")
            await asyncio.sleep(0.02)
        bound = found[0]
        return str(bound[0]), int(bound[1])

    async def close(self) -> None:
        """Stop listening, let the connections in flight end (for a while), then stop."""
        if self._master is not None and self._task is not None:
            if self._server is not None and not self._task.done():
                await self._server.servers.update([])
                deadline = time.monotonic() + DRAIN_S
                # mitmproxy signals no event when its last connection ends: poll its table.
                while self._server.connections and time.monotonic() < deadline:  # noqa: ASYNC110
                    await asyncio.sleep(0.02)
            self._master.shutdown()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._master = self._server = self._task = None
        if self._own_confdir is not None:
            shutil.rmtree(self._own_confdir, ignore_errors=True)
            self._own_confdir = None

    async def __aenter__(self) -> EgressProxy:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()
