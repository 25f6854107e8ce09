"""Headers the proxy adds for a host, so that code in a sandbox can use an API whose token it
never holds (`cellmate egress-proxy --secrets FILE`, CELLMATE_NETWORK_SECRETS_FILE).

    [{"host": "api.example.com",                       exact name (no wildcard)
      "port": 443,                                     optional, 443 by default
      "channels": ["slack:T1:C1", "discord:G1:C2"],    optional: only these channels
      "headers": {"Authorization": "Bearer ..."}}]

Only HTTPS (a CONNECT tunnel) to that host and port, from a conversation the entry names (or
any), is intercepted: the proxy terminates the sandbox's TLS with the installation's own CA
(which the sandbox trusts; it never has the key), adds the headers to each request, and
connects to the checked address over TLS it verifies. Every other tunnel stays opaque. The
headers go only on requests inside that tunnel, whose server is that host's checked address;
a redirect elsewhere is a new request, decided and relayed without them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from egressproxy.grants import BadDoor, is_name, normal_host

HEADER_NAME = frozenset(
    "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)


@dataclass(frozen=True, slots=True)
class Secret:
    host: str
    port: int
    headers: tuple[tuple[str, str], ...]
    channels: frozenset[str] = field(default_factory=frozenset)
    """`platform:workspace:channel` scopes; empty: every conversation."""

    def applies(self, owner: str, host: str, port: int) -> bool:
        if host != self.host or port != self.port:
            return False
        if not self.channels:
            return True
        return owner.rsplit(":", 1)[0] in self.channels


class Secrets:
    """The operator's entries; `for_request` names the headers for one owner's tunnel."""

    def __init__(self, entries: tuple[Secret, ...] = ()) -> None:
        self.entries = entries

    def __bool__(self) -> bool:
        return bool(self.entries)

    def for_request(self, owner: str, host: str, port: int) -> tuple[tuple[str, str], ...]:
        name = normal_host(host)
        found: list[tuple[str, str]] = []
        for entry in self.entries:
            if entry.applies(owner, name, port):
                found += entry.headers
        return tuple(found)

    @classmethod
    def load(cls, path: Path) -> Secrets:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise BadDoor(f"{path}: not a readable JSON file ({type(exc).__name__})") from None
        return cls.parse(data, str(path))

    @classmethod
    def parse(cls, data: Any, where: str = "the secrets file") -> Secrets:
        if not isinstance(data, list):
            raise BadDoor(f"{where}: a list of entries, each with a host and headers")
        return cls(tuple(_entry(item, f"{where}, entry {n + 1}") for n, item in enumerate(data)))


def _entry(item: Any, where: str) -> Secret:
    if not isinstance(item, dict) or set(item) - {"host", "port", "channels", "headers"}:
        raise BadDoor(f"{where}: only host, port, channels and headers")
    host = normal_host(str(item.get("host", "")))
    if not is_name(host):
        raise BadDoor(f"{where}: host must be one exact name (no wildcard, no address)")
    port = item.get("port", 443)
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise BadDoor(f"{where}: port must be a number from 1 to 65535")
    headers = item.get("headers")
    if not isinstance(headers, Mapping) or not headers:
        raise BadDoor(f"{where}: headers must name at least one header")
    pairs: list[tuple[str, str]] = []
    for name, value in headers.items():
        if not isinstance(name, str) or not name or set(name) - HEADER_NAME:
            raise BadDoor(f"{where}: {name!r} is not a header name")
        if not isinstance(value, str) or any(c in value for c in "\r\n\0"):
            raise BadDoor(f"{where}: the value of {name} must be one line of text")
        pairs.append((name, value))
    channels = item.get("channels", [])
    if not isinstance(channels, list) or not all(
        isinstance(c, str) and c.count(":") == 2 for c in channels
    ):
        raise BadDoor(f"{where}: channels is a list of platform:workspace:channel")
    return Secret(host, port, tuple(pairs), frozenset(channels))
