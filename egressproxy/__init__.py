"""The egress proxy: the only way out of a sandbox when the network is `allowlist`.

A sandbox has no route anywhere but to this proxy. Each request it makes (plain HTTP
through the proxy, or CONNECT for anything else, TLS included) is decided on who owns the
sandbox (its address on the sandbox network, told by the bot through `Owners`), which doors
that owner has (operator-wide, the channel's, the run's: `Grants`), and where the host
really leads: private addresses are never reached, whatever the grant, in any spelling,
through any name, or through a name that resolves differently at connect time.

    decide      allow or refuse, with a reason (pure)
    addresses   address spellings and the classes never reached (pure)
    grants      doors, grants and the proxy's perimeter (pure)
    addon       the mitmproxy addon: decide, pin the checked address, count
    server      mitmproxy's master with that addon: `EgressProxy`
    owners      the `Owners` seam (the bot's side) and static/file versions
    resolve     the `Resolver` seam: names resolved once
    audit       per-owner counts and one JSON log line per request

    cellmate egress-proxy --listen 0.0.0.0:3128 --owners /etc/cellmate/owners.json

Importing the package needs no mitmproxy: the bot uses its grants, owners and audit types.
`egressproxy.server` (and `egressproxy.addon`) need it, where the proxy runs.
"""

from egressproxy.audit import Audit
from egressproxy.decide import Verdict, admit, decide
from egressproxy.grants import BadDoor, Door, Grants, Perimeter, PrivateDoor
from egressproxy.owners import FileOwners, Owners, StaticOwners
from egressproxy.resolve import Resolver, StaticResolver, SystemResolver

REFUSED_HEADER = "X-Cellmate-Refused"
"""On every refusal the proxy answers (403): `host:port`, for the runner and the bot."""

__all__ = [
    "REFUSED_HEADER",
    "Audit",
    "BadDoor",
    "Door",
    "FileOwners",
    "Grants",
    "Owners",
    "Perimeter",
    "PrivateDoor",
    "Resolver",
    "StaticOwners",
    "StaticResolver",
    "SystemResolver",
    "Verdict",
    "admit",
    "decide",
]
