"""Allow or refuse one request, with a reason a person understands. Pure: no I/O.

A decision is taken in two steps so that a name nobody granted is never looked up (a lookup
the sandbox can trigger at will would be a channel out through DNS):

    verdict = admit(grants, host, port, perimeter)       # the door, and a written address
    if verdict.allowed and verdict.lookup:               # a name: resolve it ONCE, then
        verdict = decide(grants, host, port, addresses, perimeter)
    # connect to verdict.address, the address that was checked, and to nothing else

`decide` does both steps. Every address a name resolves to is checked, and one bad address
refuses the name: a resolver that mixes a public and a private answer gets nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from egressproxy.addresses import looks_numeric, parse_address, private_reason
from egressproxy.grants import Grants, Perimeter, is_name, normal_host


@dataclass(frozen=True, slots=True)
class Verdict:
    allowed: bool
    reason: str
    """For a person: why it was refused, or which grant opened it."""
    host: str
    """The host as compared (lower case, no trailing dot; an address in its plain form)."""
    port: int
    layer: str | None = None
    """What opened it: operator, channel, once or private; None when refused."""
    lookup: str | None = None
    """A name still to resolve before connecting (after `admit` only)."""
    address: str | None = None
    """The checked address to connect to (when allowed and resolved, or written as one)."""

    @property
    def target(self) -> str:
        """`host:port` as the refusal header carries it."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def _shown(host: str, port: int) -> str:
    """A host as a person reads it: the port only when it is not a default one."""
    shown = f"[{host}]" if ":" in host else host
    return shown if port in (80, 443) else f"{shown}:{port}"


def admit(grants: Grants, host: str, port: int, perimeter: Perimeter | None = None) -> Verdict:
    """The decision that needs no lookup: is there a door, and is a written address
    allowed? A name that passes comes back allowed with `lookup` set."""
    perimeter = perimeter or Perimeter()
    name = normal_host(host)

    def refused(reason: str, shown: str = name) -> Verdict:
        return Verdict(False, reason.format(host=_shown(shown, port)), shown, port)

    if not 0 < port < 65536:
        return refused("{host} has no valid port")
    address = parse_address(name)
    if address is None and (looks_numeric(name) or not is_name(name)):
        return refused("{host} is not a valid host name")
    shown = str(address) if address is not None else name
    if address is not None:
        if perimeter.refuses(address):
            return refused("{host} is the proxy's own side and never reachable", shown)
        if perimeter.private_door(shown, port):
            return Verdict(True, "opened by the operator", shown, port, "private", None, shown)
        if (why := private_reason(address)) is not None:
            return refused(f"{{host}} is {why}", shown)
    if perimeter.private_door(name, port):
        return Verdict(True, "opened by the operator", name, port, "private", name, None)
    layer = grants.layer_opening(shown, port)
    if layer is None:
        return refused("{host} is not open to this channel", shown)
    reason = {
        "operator": "open to every channel",
        "channel": "open to this channel",
        "once": "open for this run",
    }[layer]
    if address is not None:
        return Verdict(True, reason, shown, port, layer, None, shown)
    return Verdict(True, reason, shown, port, layer, name, None)


def decide(
    grants: Grants,
    host: str,
    port: int,
    resolved: Sequence[str] = (),
    perimeter: Perimeter | None = None,
) -> Verdict:
    """The whole decision for `host:port`, given what the host resolved to (ignored when the
    host is written as an address). Allowed means: connect to `verdict.address`."""
    perimeter = perimeter or Perimeter()
    first = admit(grants, host, port, perimeter)
    if not first.allowed or first.lookup is None:
        return first
    shown = _shown(first.host, port)

    def refused(reason: str) -> Verdict:
        return Verdict(False, reason, first.host, port)

    if not resolved:
        return refused(f"{shown} did not resolve to any address")
    checked: list[str] = []
    for text in resolved:
        address = parse_address(text)
        if address is None:
            return refused(f"{shown} resolved to something that is not an address")
        if perimeter.refuses(address):
            return refused(f"{shown} resolves to {address}, the proxy's own side")
        # The operator's named private door lets its name lead to private addresses.
        if first.layer != "private" and (why := private_reason(address)) is not None:
            return refused(f"{shown} resolves to {address}, {why}")
        checked.append(str(address))
    return Verdict(True, first.reason, first.host, port, first.layer, None, checked[0])
