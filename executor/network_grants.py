"""What a sandbox may reach through the egress proxy: host patterns and the grants of one
conversation, as one frozen value that the bot builds and the proxy asks.

    pattern   example.com          that name, ports 443 and 80
              example.com:8443     that name, that port only
              *.example.com        any name under example.com (not example.com itself)
              93.184.216.34:443    a public address (private ones only where the operator
                                   names them in CELLMATE_NETWORK_PRIVATE_ALLOWED)

    Grants(conversation, (Grant(pattern, layer, by), ...)).opening(host, port) -> Grant | None

Layers: the operator's (CELLMATE_NETWORK_ALLOWED, everywhere), the channel's (kept with its
/policy), and one run's (consumed by the next run of the conversation).

Patterns are parsed strictly and rebuilt from what was understood (IDNA for names,
`ipaddress` for addresses): no other wildcards, no userinfo, paths or schemes, no address
forms other than dotted decimal IPv4 and bracketed IPv6 (integer, octal, hex and short IPv4
forms are refused, since resolvers read them as addresses). A name that *resolves* to a
private address is the proxy's to refuse when it connects; this module decides on text only.

Standard library and `idna` only: the bot and the egress proxy both import it.
"""

from __future__ import annotations

import enum
import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

import idna

DEFAULT_PORTS = frozenset({443, 80})
LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")
LOOPBACK_NAMES = ("localhost",)
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class PatternError(ValueError):
    """A host pattern that cannot be used; the message says why, for the person."""


class Layer(enum.StrEnum):
    OPERATOR = "operator"
    CHANNEL = "channel"
    ONCE = "once"


@dataclass(frozen=True, slots=True)
class HostPattern:
    host: str
    """An IDNA (ASCII, lower-case) name, or an address; for a wildcard, the suffix."""
    wildcard: bool = False
    ports: frozenset[int] = DEFAULT_PORTS

    def matches(self, host: str, port: int) -> bool:
        """Whether a request to `host` (as `normalize_host` gives it) on `port` fits."""
        if port not in self.ports:
            return False
        if self.wildcard:
            return host.endswith("." + self.host)
        return host == self.host

    @property
    def name(self) -> str:
        """The host part as a person types it (no port)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"*.{host}" if self.wildcard else host

    @property
    def ports_text(self) -> str:
        return " and ".join(str(port) for port in sorted(self.ports, reverse=True))

    def __str__(self) -> str:
        if self.ports == DEFAULT_PORTS:
            return self.name
        (port,) = self.ports
        return f"{self.name}:{port}"


@dataclass(frozen=True, slots=True)
class Grant:
    pattern: HostPattern
    layer: Layer
    by: str = ""
    """Who granted it (a user id); '' for the operator's."""


@dataclass(frozen=True, slots=True)
class Grants:
    """Everything open to one conversation: the operator's, its channel's and one run's."""

    conversation: str
    grants: tuple[Grant, ...] = ()
    private: frozenset[tuple[str, int]] = frozenset()
    """Private HOST:PORTs the operator lets grants name (the proxy may connect to them)."""

    def opening(self, host: str, port: int) -> Grant | None:
        """The grant that opens `host:port` to this conversation (the widest layer first),
        or None: the door is closed."""
        try:
            name = normalize_host(host)
        except PatternError:
            return None
        for grant in self.grants:
            if grant.pattern.matches(name, port):
                return grant
        return None

    def allows(self, host: str, port: int) -> bool:
        return self.opening(host, port) is not None


def normalize_host(text: str) -> str:
    """A host as requests name it, in the form patterns hold: an IDNA A-label name in lower
    case, or an address in its compressed form; raises `PatternError` for anything else."""
    text = text.strip().rstrip(".")
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    address = _address(text)
    if address is not None:
        return address.compressed
    return _name(text)


def parse_pattern(text: str, private: Iterable[tuple[str, int]] = ()) -> HostPattern:
    """A host pattern typed by a person or an operator; raises `PatternError` saying what is
    wrong. `private`: the operator's HOST:PORTs that may be private."""
    raw = text.strip()
    if not raw:
        raise PatternError("Name a host, like example.com or *.example.com:8443.")
    if any(mark in raw for mark in ("/", "@", "?", "#", " ", "\\")):
        raise PatternError(
            f"{_shown(raw)} is not a host: give a name like example.com (no scheme, path or user)."
        )
    host, port = _split_port(raw)
    host = host.rstrip(".")
    wildcard = host.startswith("*.")
    if wildcard:
        host = host[2:]
    if "*" in host:
        raise PatternError(
            f"{_shown(raw)}: the only wildcard allowed is a leading *. (as in *.example.com)."
        )
    ports = frozenset({port}) if port is not None else DEFAULT_PORTS
    bracketed = host.startswith("[") and host.endswith("]")
    address = _address(host[1:-1] if bracketed else host)
    if address is None and ":" in host:
        raise PatternError(
            f"{_shown(raw)}: write an IPv6 address in brackets, like [2001:db8::1]:443."
        )
    if address is not None:
        if wildcard:
            raise PatternError(f"{_shown(raw)}: a wildcard goes with names, not addresses.")
        pattern = HostPattern(address.compressed, False, ports)
        _check_private(pattern, address, set(private), raw)
        return pattern
    _refuse_numeric(host, raw)
    name = _name(host, raw)
    if wildcard and name.count(".") < 1:
        raise PatternError(
            f"{_shown(raw)} would open a whole top-level domain: name one below it, "
            "like *.example.com."
        )
    pattern = HostPattern(name, wildcard, ports)
    if _is_loopback_name(name):
        _check_private(pattern, None, set(private), raw)
    return pattern


def parse_private(entries: Iterable[str]) -> frozenset[tuple[str, int]]:
    """The operator's CELLMATE_NETWORK_PRIVATE_ALLOWED: HOST:PORT entries, each with its
    port, no wildcards."""
    found: set[tuple[str, int]] = set()
    for entry in entries:
        host, port = _split_port(entry.strip())
        if port is None or "*" in host:
            raise PatternError(
                f"{_shown(entry)}: a private destination is one HOST:PORT, like db.internal:5432."
            )
        found.add((normalize_host(host), port))
    return frozenset(found)


def _split_port(text: str) -> tuple[str, int | None]:
    if text.startswith("["):
        end = text.find("]")
        if end == -1:
            raise PatternError(f"{_shown(text)}: the IPv6 address has no closing bracket.")
        host, rest = text[: end + 1], text[end + 1 :]
        if not rest:
            return host, None
        if not rest.startswith(":"):
            raise PatternError(f"{_shown(text)}: only :PORT may follow the address.")
        return host, _port(rest[1:], text)
    if text.count(":") == 1:
        host, _, port = text.partition(":")
        return host, _port(port, text)
    return text, None


def _port(text: str, raw: str) -> int:
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= 65535:
        raise PatternError(f"{_shown(raw)}: the port must be a number from 1 to 65535.")
    return int(text)


def _address(text: str) -> Address | None:
    """An address in its one unambiguous form (dotted decimal IPv4, or IPv6), else None."""
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _refuse_numeric(host: str, raw: str) -> None:
    """Integer, octal, hex and short IPv4 forms are addresses to resolvers, not names."""
    labels = host.lower().split(".")
    if labels and NUMERIC_LABEL.match(labels[-1]):
        raise PatternError(
            f"{_shown(raw)} looks like an address in a short, integer, octal or hex form: "
            "write it as four decimal numbers (like 93.184.216.34), or name the host."
        )


def _name(host: str, raw: str = "") -> str:
    try:
        name = idna.encode(host, uts46=True).decode("ascii")
    except idna.IDNAError as exc:
        raise PatternError(f"{_shown(raw or host)} is not a valid host name ({exc}).") from None
    labels = name.split(".")
    if not name or len(name) > 253 or not all(LABEL.match(label) for label in labels):
        raise PatternError(f"{_shown(raw or host)} is not a valid host name.")
    return name


def _is_loopback_name(name: str) -> bool:
    return any(name == loop or name.endswith("." + loop) for loop in LOOPBACK_NAMES)


def _check_private(
    pattern: HostPattern, address: Address | None, private: set[tuple[str, int]], raw: str
) -> None:
    """A private destination (an address in a private range, or a loopback name) only where
    the operator named each of its HOST:PORTs."""
    if address is not None and address.is_global:
        return
    if all((pattern.host, port) in private for port in pattern.ports):
        return
    raise PatternError(
        f"{_shown(raw)} is a private address (loopback, link-local, a private range or the "
        "like), which no grant may open; only the operator can allow it, one HOST:PORT at a "
        "time, with CELLMATE_NETWORK_PRIVATE_ALLOWED."
    )


def _shown(text: str) -> str:
    """A typed pattern quoted in a message, cut short and on one line."""
    text = text.replace("\n", " ")
    return repr(text if len(text) <= 80 else text[:79] + "…")


def describe(grant: Grant) -> str:
    """One line of `/network list`: the pattern, its ports and why it is open."""
    why = {
        Layer.OPERATOR: "the operator (CELLMATE_NETWORK_ALLOWED)",
        Layer.CHANNEL: "this channel",
        Layer.ONCE: "the next run here only",
    }[grant.layer]
    who = f", by {grant.by}" if grant.by else ""
    return f"{grant.pattern.name} (port {grant.pattern.ports_text}): {why}{who}"


def patterns(texts: Iterable[str], private: Iterable[tuple[str, int]]) -> tuple[HostPattern, ...]:
    """Several patterns at once (the operator's list), the first bad one raising."""
    return tuple(parse_pattern(text, private) for text in texts)
