"""Who owns a sandbox, asked by its address on the sandbox network: the `Owners` seam.

The proxy trusts nothing the sandbox says about itself (no credential lives inside it); the
source address of the connection, on a network only the engine assigns addresses on, is
what names the sandbox. The bot implements `Owners` (in-process, or over a local HTTP call)
from its sessions; `StaticOwners` and `FileOwners` serve tests and the command line.

    {"172.30.0.7": {"owner": "discord:1/2", "operator": ["pypi.org"],
                    "channel": ["*.example.com"], "once": ["api.example.org:8443"]}}
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from egressproxy.addresses import parse_address
from egressproxy.grants import BadDoor, Door, Grants


class Owners(Protocol):
    async def grants_for(self, address: str) -> Grants | None:
        """The grants of the sandbox at `address` (as the proxy saw the peer), or None if no
        sandbox has that address. Raising refuses the request too."""
        ...


def _key(address: str) -> str:
    """One spelling per address, so that ::ffff:172.30.0.7 and 172.30.0.7 are one sandbox."""
    found = parse_address(address)
    if found is None:
        return address
    mapped = getattr(found, "ipv4_mapped", None)
    return str(mapped if mapped is not None else found)


class StaticOwners:
    """A fixed map from sandbox address to grants; `set` and `drop` change it."""

    def __init__(self, grants: Mapping[str, Grants] | None = None) -> None:
        self._grants = {_key(address): found for address, found in (grants or {}).items()}

    def set(self, address: str, grants: Grants) -> None:
        self._grants[_key(address)] = grants

    def drop(self, address: str) -> None:
        self._grants.pop(_key(address), None)

    async def grants_for(self, address: str) -> Grants | None:
        return self._grants.get(_key(address))


def grants_from(data: Mapping[str, Any]) -> dict[str, Grants]:
    """The file's JSON, checked: a bad door names itself in the error."""
    found: dict[str, Grants] = {}
    for address, entry in data.items():
        if parse_address(address) is None:
            raise BadDoor(f"{address!r}: owners are keyed by the sandbox's address")
        if not isinstance(entry, dict) or not isinstance(entry.get("owner"), str):
            raise BadDoor(f"{address}: needs an object with an owner")
        layers = {}
        for layer in ("operator", "channel", "once"):
            texts = entry.get(layer, [])
            if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
                raise BadDoor(f"{address}: {layer} is a list of HOST[:PORT]")
            layers[layer] = tuple(Door.parse(text) for text in texts)
        found[_key(address)] = Grants(entry["owner"], **layers)
    return found


class FileOwners:
    """Grants kept in a JSON file (see the module's docstring), read again when it changes:
    an operator's fixed setup, or a test's."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: tuple[int, int] | None = None
        self._grants: dict[str, Grants] = {}

    def _load(self) -> None:
        stat = self.path.stat()
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp != self._seen:
            self._grants = grants_from(json.loads(self.path.read_text(encoding="utf-8")))
            self._seen = stamp

    async def grants_for(self, address: str) -> Grants | None:
        self._load()
        return self._grants.get(_key(address))
