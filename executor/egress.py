"""The sandbox network of `CELLMATE_NETWORK=allowlist` on Docker: a door, not a hole.

    sandbox --(its only interface)--> internal bridge of the instance --> gateway = the host
                                      (no NAT, nothing forwarded)       └ egress proxy there

In `allowlist` mode every sandbox of an instance sits on one Docker network of that instance:
a bridge made `internal` (the engine forwards nothing off it and masquerades nothing),
without traffic between its containers (`enable_icc=false`), labelled like the instance's
sandboxes. Sweeps of leftover sandboxes leave it (the proxy listens on its gateway, and a
network made again would get another); `DockerBackend.remove_network` removes it.

The only next hop a sandbox has there is the bridge's gateway, which is the host (Docker
20.10 still writes a default route via it; later engines write none). The egress proxy listens
on that address, and the sandbox's environment points HTTP(S)_PROXY and pip at it
(`sandbox_environment`). Every other port of the host would answer too: the bridge is named
`cellmate-<6 hex>` so that one static host rule on the interfaces `cellmate-+`
(scripts/guard-sandbox-network.sh, which scripts/ensure-docker.sh installs) refuses them all.

In `off` mode (the default) nothing here is used: sandboxes have network mode `none`.

Who provides what: this module makes the network and says where the proxy must listen
(`EgressNetwork.proxy_address`, `EgressNetwork.listen`); the proxy and its policy are the
egress proxy's own. Under gVisor the sandbox needs a network stack of its own, which the
default `runsc` registration (`--network=none`) does not give: allowlist sandboxes run on the
engine runtime `runsc-net` (`--network=host`, gVisor's sockets in the container's own network
namespace; scripts/ensure-docker.sh registers it and says why not `sandbox`), see
`engine_runtime`.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import re
import socket
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import docker
import docker.errors

from executor.errors import SandboxError

NetworkMode = Literal["off", "allowlist"]
NETWORK_MODES: tuple[NetworkMode, ...] = ("off", "allowlist")
DEFAULT_PIP_INDEX_URL = "https://pypi.org/simple"
DEFAULT_PROXY_PORT = 3128
PACKAGES_DIR = "/opt/cellmate-packages"
"""Where `pip install` puts packages in allowlist mode: a tmpfs of its own that allows
execution (the root is read-only and /tmp is noexec, so compiled extensions need it), on
the kernel's path through PYTHONPATH."""
NETWORK_PREFIX = "cellmate-egress-"
BRIDGE_PREFIX = "cellmate-"
"""Every bridge interface of a sandbox network is named `cellmate-` and six hex digits (15
characters, the kernel's limit), so that host rules can name them all as `cellmate-+`."""
NETWORK_RUNTIMES = {"runc": "runc", "runsc": "runsc-net"}
"""The engine runtime an allowlist sandbox runs on, by the runtime the operator chose."""
NO_PROXY = "localhost,127.0.0.1,::1"
TRUSTED_CA_VARIABLE = "CELLMATE_TRUSTED_CA"
URL = re.compile(r"https?://[A-Za-z0-9.-]{1,253}(?::[0-9]{1,5})?(?:/[A-Za-z0-9._~/+-]*)?")
"""A package index URL: scheme, host, port and path; no credentials, query or fragment."""


def network_name(instance: str) -> str:
    """The instance's sandbox network: a name the engine accepts whatever the instance is."""
    return NETWORK_PREFIX + _digest(instance)[:12]


def bridge_name(instance: str) -> str:
    """The host interface of the instance's sandbox network."""
    return BRIDGE_PREFIX + _digest(instance)[:6]


def _digest(instance: str) -> str:
    return hashlib.sha256(instance.encode()).hexdigest()


def engine_runtime(runtime: str, mode: NetworkMode) -> str:
    """The runtime the engine is asked for: `runsc` stays without network (its registration
    says `--network=none`) except in allowlist mode, where it is `runsc-net`."""
    return NETWORK_RUNTIMES.get(runtime, runtime) if mode == "allowlist" else runtime


def check_index_url(url: str) -> str:
    """`url` if it is a plain http(s) URL a sandbox's pip may use; ValueError otherwise (a
    URL with credentials would put them in the sandbox's environment)."""
    if not URL.fullmatch(url):
        raise ValueError(
            f"the package index URL {url!r} must be a plain http(s) URL without credentials, "
            "query or fragment (e.g. https://pypi.org/simple)"
        )
    return url


def proxy_url(address: tuple[str, int]) -> str:
    host, port = address
    return f"http://{host}:{port}"


def sandbox_environment(
    address: tuple[str, int], pip_index_url: str, trusted_ca: str = ""
) -> dict[str, str]:
    """What a sandbox's environment holds in allowlist mode: the proxy, in both spellings
    that programs read, pip's index, and where packages go and are imported from. No
    credential: the proxy knows a sandbox by its address on the network."""
    proxy = proxy_url(address)
    index = urllib.parse.urlsplit(check_index_url(pip_index_url))
    # pip ignores a plain-HTTP index unless told it is trusted: the operator's choice of one
    # (a mirror inside the company) says so.
    trusted = {"PIP_TRUSTED_HOST": index.netloc} if index.scheme == "http" else {}
    if trusted_ca:
        # The kernel adds it to the usual CAs in a bundle of its own when it starts, and
        # points SSL_CERT_FILE, REQUESTS_CA_BUNDLE, PIP_CERT and CURL_CA_BUNDLE at it.
        trusted[TRUSTED_CA_VARIABLE] = trusted_ca
    return {
        **trusted,
        "HTTP_PROXY": proxy,
        "HTTPS_PROXY": proxy,
        "http_proxy": proxy,
        "https_proxy": proxy,
        "NO_PROXY": NO_PROXY,
        "no_proxy": NO_PROXY,
        "PIP_INDEX_URL": check_index_url(pip_index_url),
        "PIP_TARGET": PACKAGES_DIR,
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PYTHONPATH": PACKAGES_DIR,
    }


def network_spec(instance: str, labels: Mapping[str, str]) -> dict[str, Any]:
    """The arguments of `networks.create` for the instance's sandbox network (the Docker
    API proxy checks a network against the same options before a sandbox may join it)."""
    return {
        "name": network_name(instance),
        "driver": "bridge",
        "internal": True,
        "enable_ipv6": False,
        "attachable": False,
        "check_duplicate": True,
        "labels": dict(labels),
        "options": {
            "com.docker.network.bridge.name": bridge_name(instance),
            "com.docker.network.bridge.enable_icc": "false",
            "com.docker.network.bridge.enable_ip_masquerade": "false",
        },
    }


@dataclass(frozen=True, slots=True)
class NetworkInfo:
    """One sandbox network as the engine has it."""

    id: str
    name: str
    gateway: str
    subnet: str


def read_network(found: Mapping[str, Any]) -> NetworkInfo:
    """What the engine's inspection of a network says, or ValueError when it has no IPv4
    gateway (a network without one cannot hold the proxy)."""
    for config in (found.get("IPAM") or {}).get("Config") or []:
        gateway, subnet = config.get("Gateway"), config.get("Subnet")
        if gateway and subnet and ipaddress.ip_network(subnet).version == 4:
            return NetworkInfo(str(found["Id"]), str(found["Name"]), str(gateway), str(subnet))
    raise ValueError(f"the network {found.get('Name')} has no IPv4 gateway")


class EgressNetwork:
    """The sandbox network of one instance on one engine, made on demand."""

    def __init__(
        self,
        client: docker.DockerClient,
        instance: str,
        labels: Mapping[str, str],
        proxy_port: int = DEFAULT_PROXY_PORT,
    ) -> None:
        self._client = client
        self.instance = instance
        self.labels = dict(labels)
        self.proxy_port = proxy_port
        self._lock = asyncio.Lock()
        self._known: NetworkInfo | None = None

    @property
    def name(self) -> str:
        return network_name(self.instance)

    @property
    def known(self) -> NetworkInfo | None:
        """The network as last made or found here (None before the first `ensure`)."""
        return self._known

    async def ensure(self) -> NetworkInfo:
        """The network, made if it is missing (or was swept since it was last seen). A
        SandboxError says why there is none (an engine or a Docker API proxy that refuses)."""
        async with self._lock:
            try:
                self._known = await asyncio.to_thread(self._ensure)
            except docker.errors.APIError as exc:
                refused = exc.status_code == 403
                raise SandboxError(
                    (
                        "no sandbox network: the engine refused it"
                        if refused
                        else "could not make the sandbox network"
                    )
                    + f" ({exc.explanation or exc})"
                ) from exc
            return self._known

    def _ensure(self) -> NetworkInfo:
        spec = network_spec(self.instance, self.labels)
        try:
            return read_network(self._client.api.inspect_network(spec["name"]))
        except docker.errors.NotFound:
            pass
        try:
            self._client.networks.create(**spec)
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # made meanwhile by another process of the instance
                raise
        return read_network(self._client.api.inspect_network(spec["name"]))

    async def proxy_address(self) -> tuple[str, int]:
        """Where the egress proxy must listen: the network's gateway on the host."""
        info = await self.ensure()
        return info.gateway, self.proxy_port

    async def listen(
        self,
        serve: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
    ) -> asyncio.Server:
        """Start a TCP server for `serve` on the proxy address (the network is made first,
        so that its gateway exists on the host). The egress proxy, or a test's stand-in."""
        host, port = await self.proxy_address()
        return await asyncio.start_server(serve, host, port, family=socket.AF_INET)
