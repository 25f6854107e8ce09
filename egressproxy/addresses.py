"""What an address is, read the way a C library reads it, and which addresses no grant opens.

A host written as numbers is read with `socket.inet_aton` semantics, as the sandbox's own
resolver would: `127.1`, `2130706433`, `0x7f.0.0.1` and `0177.0.0.1` all mean 127.0.0.1. So
a door can never be asked for under a spelling that reads differently here and at connect.

The classes a sandbox may never reach are a table (first match gives the reason); anything
that Python's `ipaddress` does not call global is refused as well, with a generic reason.
Nothing here does I/O.
"""

from __future__ import annotations

import ipaddress
import re
import socket

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# inet_aton reads decimal, octal (leading 0) and hex (0x) parts, one to four of them; a glibc
# quirk also accepts anything after a space, which no host name contains anyway.
NUMERIC_V4 = re.compile(r"(?:0[xX][0-9a-fA-F]*|[0-9]+)(?:\.(?:0[xX][0-9a-fA-F]*|[0-9]+)){0,3}")


def parse_address(host: str) -> Address | None:
    """The address a host names when it is written as one (IPv4 in any inet_aton form, IPv6
    with or without brackets and zone), else None: then it is a name to resolve."""
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if NUMERIC_V4.fullmatch(text):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(text))
        except OSError:
            # Numbers that do not make an address (a part too large): no resolver would
            # treat them as a name either, so they are refused as malformed by the caller.
            return None
    if ":" in text:
        try:
            found = ipaddress.IPv6Address(text)
        except ValueError:
            return None
        # A zone (fe80::1%eth0) says which interface, not which address; the address decides.
        return ipaddress.IPv6Address(found.packed)
    return None


def looks_numeric(host: str) -> bool:
    """Written like an IPv4 address in some form (even one that does not parse)."""
    return bool(NUMERIC_V4.fullmatch(host.strip()))


def _networks(*pairs: tuple[str, str]) -> tuple[tuple[Network, str], ...]:
    return tuple((ipaddress.ip_network(net), reason) for net, reason in pairs)


NEVER = _networks(
    ("0.0.0.0/8", "the unspecified address (this host)"),
    ("127.0.0.0/8", "a loopback address"),
    ("169.254.0.0/16", "a link-local address (where cloud metadata services live)"),
    ("10.0.0.0/8", "a private address"),
    ("172.16.0.0/12", "a private address"),
    ("192.168.0.0/16", "a private address"),
    ("100.64.0.0/10", "a shared (carrier-grade NAT) address"),
    ("192.0.0.0/24", "reserved for protocol assignments"),
    ("192.0.2.0/24", "reserved for documentation"),
    ("198.51.100.0/24", "reserved for documentation"),
    ("203.0.113.0/24", "reserved for documentation"),
    ("198.18.0.0/15", "reserved for network benchmarks"),
    ("224.0.0.0/4", "a multicast address"),
    ("240.0.0.0/4", "a reserved address"),
    ("::/128", "the unspecified address (this host)"),
    ("::1/128", "a loopback address"),
    ("::ffff:0:0/96", "an IPv4-mapped IPv6 address"),
    ("::/96", "an IPv4-compatible IPv6 address"),
    ("64:ff9b:1::/48", "a local-use NAT64 address"),
    ("fe80::/10", "a link-local address"),
    ("fec0::/10", "a site-local address"),
    ("fc00::/7", "a private (unique-local) IPv6 address"),
    ("ff00::/8", "a multicast address"),
    ("100::/64", "a discard-only address"),
    ("2001:db8::/32", "reserved for documentation"),
    ("2001::/23", "reserved for protocol assignments"),
)
"""Address classes no grant opens (an operator's named private HOST:PORT aside)."""

NAT64 = ipaddress.ip_network("64:ff9b::/96")


def private_reason(address: Address) -> str | None:
    """Why a sandbox may not reach this address whatever its grants, or None if it is public.

    IPv6 forms that carry an IPv4 address inside (NAT64, 6to4) are judged by the IPv4
    address they lead to."""
    for network, reason in NEVER:
        if address.version == network.version and address in network:
            return reason
    if isinstance(address, ipaddress.IPv6Address):
        inner: ipaddress.IPv4Address | None = None
        if address in NAT64:
            inner = ipaddress.IPv4Address(address.packed[-4:])
        elif address.sixtofour is not None:
            inner = address.sixtofour
        if inner is not None and (why := private_reason(inner)) is not None:
            return f"an IPv6 address that leads to {inner}, {why}"
    if not address.is_global:
        return "not a public address"
    return None
