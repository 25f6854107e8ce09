"""The stand-in servers as the test cluster's Pods reach them.

The kit runs the cluster in a network namespace of its own, where Pods reach nothing but the
pod subnet and the bridge's own address (10.244.0.1). The stand-ins (Slack, Discord, the
model, PostgreSQL) listen on this machine's loopback; a relay per server listens on the
bridge address inside the kit's namespace and pipes each connection to the server's
loopback port. The relay's socket is made in the namespace by a short-lived thread that
joins it (setns), so the test process itself stays where it is and nothing else of the
machine is exposed."""

from __future__ import annotations

import asyncio
import ctypes
import os
import socket
import threading

from tests.compose.relay import Relay

KIT_NETNS = os.environ.get("K8S_KIT_NETNS", "cellmate-k8s")
BRIDGE_ADDRESS = os.environ.get("CELLMATE_TEST_KIT_BRIDGE", "10.244.0.1")
"""The pod bridge's address in the kit's namespace (the kit's pod subnet, first address)."""
CLONE_NEWNET = 0x40000000


def listen_in(netns: str, host: str) -> socket.socket:
    """A listening TCP socket on `host`, port chosen by the kernel, inside `netns`."""
    made: list[socket.socket] = []
    failed: list[BaseException] = []

    def inside() -> None:
        # setns changes only the calling thread's namespace: this thread ends right after.
        libc = ctypes.CDLL(None, use_errno=True)
        try:
            fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
            try:
                if libc.setns(fd, CLONE_NEWNET) != 0:
                    error = ctypes.get_errno()
                    raise OSError(error, f"setns into {netns}: {os.strerror(error)}")
            finally:
                os.close(fd)
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, 0))
            sock.listen(128)
            sock.setblocking(False)
            made.append(sock)
        except BaseException as exc:  # handed to the caller's thread
            failed.append(exc)

    thread = threading.Thread(target=inside, name=f"listen-in-{netns}")
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return made[0]


class KitRelay(Relay):
    """A relay whose listening side is in the kit's namespace, on the pod bridge."""

    def __init__(self, target_port: int) -> None:
        super().__init__(BRIDGE_ADDRESS, target_port)

    async def start(self) -> KitRelay:
        sock = listen_in(KIT_NETNS, BRIDGE_ADDRESS)
        self._server = await asyncio.start_server(self._connect, sock=sock)
        self.port = sock.getsockname()[1]
        return self
