"""The installation's own CA, with which the proxy terminates TLS for hosts that have
secrets: made once in a folder of the bot's data (its key stays there, readable by the bot's
user only), its certificate given to sandboxes to trust."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

BASENAME = "mitmproxy"
"""The file names mitmproxy looks for in its `confdir`."""


def installation_ca(confdir: Path) -> str:
    """The CA certificate (PEM) in `confdir`, made there first when missing."""
    from mitmproxy.certs import CertStore  # where the proxy runs, not everywhere the bot does

    if not (confdir / f"{BASENAME}-ca.pem").exists():
        CertStore.create_store(
            confdir, BASENAME, 2048, organization="Cellmate", cn="Cellmate egress proxy"
        )
    return (confdir / f"{BASENAME}-ca-cert.pem").read_text(encoding="ascii")


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m egressproxy.ca DIR`: make an installation CA in DIR (for a proxy that runs
    on its own, whose Secret holds it: see deploy/kubernetes/egress-proxy.yaml)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m egressproxy.ca DIR", file=sys.stderr)
        return 2
    folder = Path(args[0])
    folder.mkdir(parents=True, exist_ok=True)
    installation_ca(folder)
    print(f"{folder / (BASENAME + '-ca.pem')}: key and certificate (the proxy's only)")
    print(f"{folder / (BASENAME + '-ca-cert.pem')}: certificate (sandboxes trust it)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
