"""Where the proxy listens when it runs beside the engine rather than as the bot's child
(Docker Compose): on the gateway of the instance's sandbox network, found by the bridge's
name, once the bot has made that network.

The name is executor.egress's rule (`cellmate-` and six hex digits of the instance's
SHA-256), kept here too so that the proxy needs nothing of the bot's; a test holds the two
to the same answer."""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import logging
import socket
import struct

log = logging.getLogger(__name__)

PREFIX = "cellmate-"
SIOCGIFADDR = 0x8915
POLL_S = 0.5


def bridge_name(instance: str) -> str:
    return PREFIX + hashlib.sha256(instance.encode()).hexdigest()[:6]


def interface_address(name: str) -> str | None:
    """The interface's IPv4 address, None while it has none (or does not exist)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            found = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()))
        except OSError:
            return None
    return socket.inet_ntoa(found[20:24])


async def gateway_of(instance: str) -> str:
    """The gateway address of `instance`'s sandbox network, waiting until the bot made it."""
    name = bridge_name(instance)
    told = False
    while (address := interface_address(name)) is None:
        if not told:
            log.info("waiting for the sandbox network of %r (bridge %s)", instance, name)
            told = True
        await asyncio.sleep(POLL_S)
    return address
