"""The installation's own CA, with which the proxy terminates TLS for hosts that have
secrets: made once in a folder of the bot's data (its key stays there, readable by the bot's
user only), its certificate given to sandboxes to trust."""

from __future__ import annotations

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
