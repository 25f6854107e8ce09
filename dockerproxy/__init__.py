"""The Docker API proxy: the only way the bot reaches the Docker engine in production.

Whoever holds the Docker socket is root on the host. The proxy holds it instead of the bot,
in a process of its own, and lets a client do only what Cellmate's executor does: create, run,
read and remove hardened sandbox containers and their tmpfs volumes, for one bot instance
(`--instance`). A compromised bot that speaks to it can start sandboxes (within the operator's
limits) and touch its own instance's sandboxes, and nothing else: no other instance's
sandboxes, no other container, no host path, no image pulls or builds, no exec, no logs.

It never forwards what it has not understood: every request the engine gets is written by the
proxy, from the allowed fields of the client's (see `bodies`, `routes` and `wire`).

    cellmate docker-proxy --listen 0.0.0.0:2375 --upstream /var/run/docker.sock --instance prod
"""

from dockerproxy.errors import RequestRefused
from dockerproxy.policy import SANDBOX_LABEL, Policy
from dockerproxy.server import DockerProxy

__all__ = ["SANDBOX_LABEL", "DockerProxy", "Policy", "RequestRefused"]
