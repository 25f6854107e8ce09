"""`cellmate egress-proxy`: the egress proxy as a process, with the operator's perimeter as
options and the sandboxes' grants from a file (the bot serves them itself when it runs the
proxy in its own deployment)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import logging
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from egressproxy.addresses import parse_address
from egressproxy.bridges import gateway_of
from egressproxy.ca import BASENAME
from egressproxy.control import MIN_TOKEN_CHARS, ControlOwners, read_token
from egressproxy.grants import BadDoor, Perimeter
from egressproxy.owners import FileOwners, Owners
from egressproxy.parent import ParentOwners, TellParent, stdin_reader
from egressproxy.resolve import PinnedResolver, SystemResolver
from egressproxy.secrets import Secrets
from egressproxy.server import EgressProxy, ProxyFailed

log = logging.getLogger("egressproxy")


def parser() -> argparse.ArgumentParser:
    found = argparse.ArgumentParser(
        prog="cellmate egress-proxy",
        description="The only way out for Cellmate sandboxes: HTTP and CONNECT, door by door.",
    )
    found.add_argument(
        "--listen",
        default="127.0.0.1:3128",
        help="HOST:PORT to listen on; @INSTANCE:PORT: the gateway of that bot instance's "
        "sandbox network, once it exists (the proxy beside the engine, as in Compose)",
    )
    owners = found.add_mutually_exclusive_group(required=True)
    owners.add_argument(
        "--owners",
        type=Path,
        help="JSON file: sandbox address -> owner and doors (read again when it changes)",
    )
    owners.add_argument(
        "--parent",
        action="store_true",
        help="ask the process that started this one, over stdin and stdout (the bot does "
        "this); every request is told to it there too, and the proxy stops when stdin ends",
    )
    owners.add_argument(
        "--control",
        metavar="HOST:PORT",
        help="ask the bot that connects to HOST:PORT with the token of --control-token-file "
        "(the proxy in a deployment of its own, as on Kubernetes); see egressproxy.control",
    )
    owners.add_argument(
        "--dial-bot",
        metavar="HOST:PORT",
        help="connect to the bot's control port there, showing the token of "
        "--control-token-file, and ask it (the proxy beside the engine, as in Compose)",
    )
    found.add_argument(
        "--control-token-file",
        type=Path,
        help="file holding the token shown on the control connection (--control, --dial-bot)",
    )
    found.add_argument(
        "--control-token-env",
        metavar="VARIABLE",
        help="the environment variable holding that token instead (as Compose passes it)",
    )
    found.add_argument(
        "--private-allowed",
        default="",
        metavar="HOST:PORT,...",
        help="private HOST:PORTs open to every sandbox (CELLMATE_NETWORK_PRIVATE_ALLOWED)",
    )
    found.add_argument(
        "--refuse",
        default="",
        metavar="CIDR,...",
        help="addresses never reached, named or not: the bot's HTTP port, the Docker API "
        "proxy, the Kubernetes API (the proxy's own listening address is added)",
    )
    found.add_argument(
        "--secrets",
        type=Path,
        help="JSON file: headers the proxy adds for a host (see egressproxy.secrets)",
    )
    found.add_argument(
        "--confdir",
        type=Path,
        help="where the CA lives that the proxy terminates TLS with for --secrets (made "
        "there when missing; the sandboxes trust its certificate)",
    )
    found.add_argument(
        "--secrets-dir",
        type=Path,
        help="a folder (a mounted Secret) that may hold secrets.json, the CA to terminate TLS "
        "with for it (mitmproxy-ca.pem: key and certificate) and upstream-ca.pem; without "
        "secrets.json, no secrets (instead of --secrets, --confdir and --upstream-ca)",
    )
    found.add_argument(
        "--upstream-ca",
        type=Path,
        help="PEM file of CA certificates the hosts' TLS is verified with, besides the usual",
    )
    found.add_argument(
        "--resolve",
        action="append",
        default=[],
        metavar="NAME=ADDRESS",
        help="answer NAME with ADDRESS instead of asking DNS (repeatable); still checked",
    )
    return found


def pinned_names(entries: Sequence[str]) -> dict[str, list[str]]:
    pinned: dict[str, list[str]] = {}
    for entry in entries:
        name, _, address = entry.partition("=")
        if not name or parse_address(address) is None:
            raise SystemExit(f"cellmate egress-proxy: --resolve wants NAME=ADDRESS, not {entry!r}")
        pinned.setdefault(name.strip().lower(), []).append(address.strip())
    return pinned


def perimeter_from(args: argparse.Namespace, listen_host: str) -> Perimeter:
    refused = args.refuse
    own = parse_address(listen_host)
    if own is not None and not own.is_unspecified:
        refused = f"{refused},{ipaddress.ip_network(own)}"
    try:
        return Perimeter.parse(args.private_allowed, refused)
    except BadDoor as exc:
        raise SystemExit(f"cellmate egress-proxy: {exc}") from None


def host_port(text: str, option: str) -> tuple[str, int]:
    host, _, port_text = text.rpartition(":")
    host = host.strip("[]")
    if not host or not port_text.isdigit() or int(port_text) > 65535:
        raise SystemExit(f"cellmate egress-proxy: {option} must be HOST:PORT (PORT 0: any free)")
    return host, int(port_text)


def control_owners(args: argparse.Namespace) -> ControlOwners | None:
    if args.control is None and args.dial_bot is None:
        return None
    if args.control_token_env:
        token = os.environ.get(args.control_token_env, "").strip()
        if len(token) < MIN_TOKEN_CHARS:
            raise SystemExit(
                f"cellmate egress-proxy: {args.control_token_env} must hold the control token "
                f"(at least {MIN_TOKEN_CHARS} characters)"
            )
        return ControlOwners(token.encode())
    if args.control_token_file is None:
        raise SystemExit(
            "cellmate egress-proxy: --control and --dial-bot need --control-token-file"
        )
    try:
        return ControlOwners(read_token(args.control_token_file))
    except (OSError, ValueError) as exc:
        raise SystemExit(f"cellmate egress-proxy: {exc}") from None


def from_secrets_dir(args: argparse.Namespace) -> None:
    """--secrets-dir as the options it stands for: the CA copied into a private folder of
    its own, since mitmproxy writes beside it and a mounted Secret is read-only."""
    folder: Path | None = args.secrets_dir
    if folder is None:
        return
    if args.secrets or args.confdir or args.upstream_ca:
        raise SystemExit(
            "cellmate egress-proxy: --secrets-dir stands for --secrets, --confdir and "
            "--upstream-ca; give one or the others"
        )
    if not (folder / "secrets.json").is_file():
        log.info("no secrets.json in %s: no secrets are added", folder)
        return
    ca = folder / f"{BASENAME}-ca.pem"
    if not ca.is_file():
        raise SystemExit(
            f"cellmate egress-proxy: secrets need their CA, {ca} (python -m egressproxy.ca)"
        )
    confdir = Path(tempfile.mkdtemp(prefix="cellmate-egress-ca-"))
    shutil.copyfile(ca, confdir / ca.name)
    args.secrets, args.confdir = folder / "secrets.json", confdir
    if (folder / "upstream-ca.pem").is_file():
        args.upstream_ca = folder / "upstream-ca.pem"


def owners_name(args: argparse.Namespace) -> str:
    """Who the proxy asks, for its first log line."""
    if args.parent:
        return "the parent process"
    if args.control:
        return f"the bot connected to {args.control}"
    if args.dial_bot:
        return f"the bot at {args.dial_bot}"
    return str(args.owners)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    host, port = host_port(args.listen, "--listen")
    instance = host[1:] if host.startswith("@") else None
    control = control_owners(args)
    perimeter = perimeter_from(args, "0.0.0.0" if instance is not None else host)  # noqa: S104
    if args.owners is not None and not args.owners.is_file():
        raise SystemExit(f"cellmate egress-proxy: no owners file at {args.owners}")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from_secrets_dir(args)
    # mitmproxy's own connection chatter is for debugging it; the audit log is what counts.
    logging.getLogger("mitmproxy").setLevel(logging.WARNING)

    try:
        secrets = Secrets.load(args.secrets) if args.secrets is not None else None
    except BadDoor as exc:
        raise SystemExit(f"cellmate egress-proxy: {exc}") from None
    pinned = pinned_names(args.resolve)
    parent = ParentOwners(sys.stdout) if args.parent else None
    if parent is not None:
        # The parent reads the audit's lines as data; nothing else goes to stdout.
        audit_log = logging.getLogger("egressproxy.audit")
        audit_log.addHandler(TellParent(parent))
        audit_log.propagate = False
    if control is not None:
        # Told to the bot when one is connected, and kept in the proxy's own log always.
        logging.getLogger("egressproxy.audit").addHandler(TellParent(control))

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        owners: Owners = parent or control or FileOwners(args.owners)
        async with EgressProxy(
            owners,
            PinnedResolver(pinned, SystemResolver()),
            perimeter=perimeter,
            secrets=secrets,
            confdir=args.confdir,
            upstream_ca=args.upstream_ca,
        ) as proxy:
            listen_host = host
            if instance is not None:
                waiting = asyncio.create_task(gateway_of(instance))
                stopping = asyncio.create_task(stop.wait())
                await asyncio.wait({waiting, stopping}, return_when=asyncio.FIRST_COMPLETED)
                stopping.cancel()
                if not waiting.done():
                    waiting.cancel()
                    return
                listen_host = waiting.result()
            bound = await proxy.start(listen_host, port)
            log.info(
                "serving Cellmate sandboxes' egress on %s:%s (owners: %s; private doors: %s)",
                *bound,
                owners_name(args),
                args.private_allowed or "none",
            )
            if control is not None and args.dial_bot is not None:
                dialing = asyncio.create_task(control.dial(*host_port(args.dial_bot, "--dial-bot")))
                await stop.wait()
                dialing.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await dialing
                return
            if control is not None:
                listening = await control.serve(*host_port(args.control, "--control"))
                log.info("the control port %s listens for the bot", args.control)
                async with listening:
                    await stop.wait()
                return
            if parent is None:
                await stop.wait()
                return
            parent.tell({"event": "listening", "host": bound[0], "port": bound[1]})
            reading = asyncio.create_task(parent.read(await stdin_reader()))
            stopping = asyncio.create_task(stop.wait())
            await asyncio.wait({reading, stopping}, return_when=asyncio.FIRST_COMPLETED)
            for task in (reading, stopping):
                task.cancel()

    try:
        asyncio.run(run())
    except ProxyFailed as exc:
        raise SystemExit(f"cellmate egress-proxy: {exc}") from None
    except KeyboardInterrupt:
        return 130
    finally:
        if args.secrets_dir is not None and args.confdir is not None:
            shutil.rmtree(args.confdir, ignore_errors=True)  # the CA's private copy
    return 0
