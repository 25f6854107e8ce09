"""`cellmate docker-proxy`: the proxy as a process, with the operator's policy as options."""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
from collections.abc import Sequence

from dockerproxy.policy import INSTANCE, Policy
from dockerproxy.server import DockerProxy

log = logging.getLogger("dockerproxy")
USER = re.compile(r"(?P<uid>[1-9][0-9]{0,9}):(?P<gid>[1-9][0-9]{0,9})")


def parser() -> argparse.ArgumentParser:
    found = argparse.ArgumentParser(
        prog="cellmate docker-proxy",
        description="Serve the Docker API to the Cellmate bot, for sandboxes only.",
    )
    default = Policy()
    found.add_argument("--listen", default="127.0.0.1:2375", help="HOST:PORT to listen on")
    found.add_argument(
        "--upstream", default="/var/run/docker.sock", help="the engine: SOCKET or HOST:PORT"
    )
    found.add_argument(
        "--instance",
        default=default.instance,
        help="the bot instance whose sandboxes it serves and labels: the bot's "
        "CELLMATE_INSTANCE (default %(default)s)",
    )
    found.add_argument(
        "--image-repository",
        default=default.image_repository,
        help="sandboxes start only from tags of this repository",
    )
    found.add_argument(
        "--sandbox-user",
        default=default.user,
        help="UID:GID every sandbox runs as (numeric, not 0)",
    )
    found.add_argument(
        "--runtime",
        action="append",
        help="a container runtime sandboxes may use (repeat; default runc and runsc)",
    )
    found.add_argument(
        "--allow-network",
        action="store_true",
        help="let sandboxes use the bridge network (off: network none only)",
    )
    found.add_argument(
        "--allow-egress-network",
        action="store_true",
        help="let sandboxes join their instance's sandbox network, whose only open address "
        "is the egress proxy (the bot's CELLMATE_NETWORK=allowlist)",
    )
    found.add_argument(
        "--network-mode",
        choices=("off", "allowlist"),
        default="off",
        help="the bot's CELLMATE_NETWORK: allowlist is --allow-egress-network (for Compose, "
        "which passes the setting as it is)",
    )
    found.add_argument(
        "--egress-proxy-port",
        type=int,
        default=default.egress_proxy_port,
        help="the egress proxy's port on that network (the bot's CELLMATE_NETWORK_PROXY_PORT)",
    )
    found.add_argument("--max-memory-mb", type=int, default=default.max_memory_mb)
    found.add_argument("--max-cpus", type=float, default=default.max_cpus)
    found.add_argument("--max-pids", type=int, default=default.max_pids)
    found.add_argument(
        "--max-upload-mb",
        type=int,
        default=default.max_upload_mb,
        help="largest tar put into a sandbox at once (its volume's size caps it too)",
    )
    found.add_argument("--max-upload-files", type=int, default=default.max_upload_members)
    return found


def policy_from(args: argparse.Namespace) -> Policy:
    user = USER.fullmatch(args.sandbox_user)
    if not user:
        raise SystemExit("cellmate docker-proxy: --sandbox-user must be UID:GID, both not 0")
    if not INSTANCE.fullmatch(args.instance):
        raise SystemExit(
            "cellmate docker-proxy: --instance must be 1 to 128 letters, digits or _.:@+=-"
        )
    return Policy(
        instance=args.instance,
        image_repository=args.image_repository,
        uid=int(user["uid"]),
        gid=int(user["gid"]),
        runtimes=frozenset(args.runtime or ("runc", "runsc")),
        allow_network=args.allow_network,
        egress_network=args.allow_egress_network or args.network_mode == "allowlist",
        egress_proxy_port=args.egress_proxy_port,
        max_memory_mb=args.max_memory_mb,
        max_cpus=args.max_cpus,
        max_pids=args.max_pids,
        max_upload_mb=args.max_upload_mb,
        max_upload_members=args.max_upload_files,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    policy = policy_from(args)
    host, _, port = args.listen.rpartition(":")
    if not host or not port.isdigit():
        raise SystemExit("cellmate docker-proxy: --listen must be HOST:PORT")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    async def run() -> None:
        proxy = DockerProxy(args.upstream, policy)
        server = await proxy.start(host, int(port))
        log.info(
            "serving the Docker API for Cellmate sandboxes of the instance %s on %s (engine: %s; "
            "user %s; runtimes %s; network %s)",
            policy.instance,
            args.listen,
            args.upstream,
            policy.user,
            ", ".join(sorted(policy.runtimes)),
            "bridge allowed"
            if policy.allow_network
            else "the sandbox network allowed"
            if policy.egress_network
            else "none",
        )
        try:
            async with server:
                await server.serve_forever()
        finally:
            await proxy.close()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        return 130
    return 0
