"""What a sandbox may reach: doors (`HOST[:PORT]`) in three layers, and the proxy's perimeter.

    Door.parse("pypi.org")            pypi.org on 443 and 80
    Door.parse("*.example.com:8443")  any name under example.com (not example.com itself), 8443
    Door.parse("[2001:db8::5]:443")   one address, written as an address

The bot builds `Grants` for the sandbox a request comes from (operator-wide hosts, the
channel's grants, the run's one-time grants); the operator gives the proxy its `Perimeter`
(named private `HOST:PORT`s it may reach, and addresses it never reaches, such as its own).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

from egressproxy.addresses import Address, Network, looks_numeric, parse_address

DEFAULT_PORTS = frozenset({443, 80})
LABEL = r"(?:[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?)"
NAME = re.compile(rf"{LABEL}(?:\.{LABEL})*")
"""A host name as DNS spells it (lower case, after IDNA): letters, digits, `-`, `_`, dots."""


class BadDoor(ValueError):
    """A `HOST[:PORT]` that is not one: the message says what is wrong, for the operator."""


def normal_host(host: str) -> str:
    """Lower case, without a trailing dot or IPv6 brackets: the one spelling compared."""
    text = host.strip().lower()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    text = text[:-1] if text.endswith(".") and not text.endswith("..") else text
    if not text.isascii():
        # An international name is compared (and resolved) in its ASCII form, as DNS has it.
        try:
            text = text.encode("idna").decode("ascii")
        except UnicodeError:
            return text  # not a name: `is_name` refuses it
    return text


def is_name(host: str) -> bool:
    """A DNS name; one that ends in an all-digit label is none (no top-level domain is)."""
    return (
        len(host) <= 253
        and bool(NAME.fullmatch(host))
        and not looks_numeric(host)
        and not host.rsplit(".", 1)[-1].isdigit()
    )


def split_host_port(text: str) -> tuple[str, int | None]:
    """`HOST`, `HOST:PORT`, `[V6]`, `[V6]:PORT` or a bare IPv6 address (no port)."""
    text = text.strip()
    port: str | None = None
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise BadDoor(f"{text!r}: an IPv6 address goes in brackets, [ADDRESS]:PORT")
        port = rest[1:] if rest else None
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    else:
        host = text
    if port is None:
        return host, None
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise BadDoor(f"{text!r}: the port must be a number from 1 to 65535")
    return host, int(port)


@dataclass(frozen=True, slots=True)
class Door:
    """One host pattern (an exact name, `*.suffix`, or an address) on a set of ports."""

    host: str
    ports: frozenset[int] = DEFAULT_PORTS

    @classmethod
    def parse(cls, text: str) -> Door:
        raw, port = split_host_port(text)
        host = normal_host(raw)
        wildcard = host.startswith("*.")
        bare = host[2:] if wildcard else host
        address = parse_address(bare)
        if address is not None:
            if wildcard:
                raise BadDoor(f"{text!r}: a wildcard goes with a name, not an address")
            bare = str(address)
        elif not is_name(bare) or (wildcard and "." not in bare):
            raise BadDoor(f"{text!r}: not a host name, *.suffix or address")
        ports = DEFAULT_PORTS if port is None else frozenset({port})
        return cls(f"*.{bare}" if wildcard else bare, ports)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ports", frozenset(self.ports))

    def opens(self, host: str, port: int) -> bool:
        """Whether this door lets through `host` (already normal: see `normal_host`, with an
        address written as `str(ipaddress)`) on `port`."""
        if port not in self.ports:
            return False
        if self.host.startswith("*."):
            return host.endswith(self.host[1:]) and is_name(host)
        return host == self.host

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        if self.ports == DEFAULT_PORTS:
            return host
        return ",".join(f"{host}:{port}" for port in sorted(self.ports))


def doors(text: str) -> tuple[Door, ...]:
    """Comma-separated doors, as the operator writes them (`CELLMATE_NETWORK_ALLOWED`)."""
    return tuple(Door.parse(part) for part in text.split(",") if part.strip())


@dataclass(frozen=True, slots=True)
class Grants:
    """Everything that opens a door for one sandbox, as the bot sees it at this moment."""

    owner: str
    """Who the traffic is counted for (the conversation): shown in logs and the audit."""
    operator: tuple[Door, ...] = ()
    """Open to every sandbox (`CELLMATE_NETWORK_ALLOWED`, e.g. the package index)."""
    channel: tuple[Door, ...] = ()
    """Granted in this channel (kept with its `/policy`)."""
    once: tuple[Door, ...] = ()
    """Granted for the run now going (the bot drops them when the run ends)."""

    def layer_opening(self, host: str, port: int) -> str | None:
        """The first layer with a door for `host:port` (operator, channel, once), or None."""
        for layer, found in (
            ("operator", self.operator),
            ("channel", self.channel),
            ("once", self.once),
        ):
            if any(door.opens(host, port) for door in found):
                return layer
        return None


@dataclass(frozen=True, slots=True)
class PrivateDoor:
    """A private `HOST:PORT` the operator opened by name (an on-prem database)."""

    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> PrivateDoor:
        raw, port = split_host_port(text)
        host = normal_host(raw)
        address = parse_address(host)
        if port is None:
            raise BadDoor(f"{text!r}: a private door names its port, HOST:PORT")
        if address is None and not is_name(host):
            raise BadDoor(f"{text!r}: not a host name or address")
        return cls(str(address) if address is not None else host, port)


@dataclass(frozen=True, slots=True)
class Perimeter:
    """The proxy's own limits, the same for every sandbox, beyond the address classes in
    `addresses.NEVER`."""

    private_allowed: tuple[PrivateDoor, ...] = ()
    """Open to every sandbox though private (`CELLMATE_NETWORK_PRIVATE_ALLOWED`)."""
    refused: tuple[Network, ...] = field(default_factory=tuple)
    """Never reached even when named above: the proxy itself, the bot's HTTP port, the
    Docker API proxy, the Kubernetes API (public addresses too, on managed clusters)."""

    @classmethod
    def parse(cls, private_allowed: str = "", refused: str = "") -> Perimeter:
        try:
            nets = tuple(
                ipaddress.ip_network(part.strip(), strict=False)
                for part in refused.split(",")
                if part.strip()
            )
        except ValueError as exc:
            raise BadDoor(f"refused networks: {exc}") from None
        return cls(
            tuple(PrivateDoor.parse(part) for part in private_allowed.split(",") if part.strip()),
            nets,
        )

    def private_door(self, host: str, port: int) -> bool:
        return any(door.host == host and door.port == port for door in self.private_allowed)

    def refuses(self, address: Address) -> bool:
        return any(address.version == net.version and address in net for net in self.refused)
