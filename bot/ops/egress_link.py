"""The egress proxy as the bot's child process (`CELLMATE_NETWORK=allowlist`, Docker).

    sandbox ──HTTP/CONNECT──> egress proxy (a process of its own: mitmproxy)
                                 │ stdout: "who owns 172.30.0.5?"   ▲ stdin: its doors
                                 ▼                                  │
                              EgressLink ── executor.owner_of(address) → the conversation
                                         ── conversations.network_grants(conversation)
                                 ◀── every request told: counted for /usage; a closed door
                                     becomes a card for the thread's approvers and a note
                                     on the run's result (which the model reads too)

The proxy listens on the sandbox network's gateway, the only address a sandbox can reach;
it knows a sandbox by its address there, so nothing inside the sandbox is a credential. The
two talk over the child's pipes (see egressproxy.parent): no port, nothing to guess. When the
bot goes, the proxy's stdin ends and it stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from bot.conversations.keys import ConversationKey
from bot.conversations.network import NetworkSettings, Verdict
from bot.metrics import Metrics
from bot.sandbox_words import CLOSED_DOOR
from egressproxy import handshake
from executor import Executor
from executor.docker_backend import DockerBackend
from executor.errors import ExecutorError
from executor.kubernetes_backend import KubernetesBackend
from executor.kubernetes_pod import egress_address
from executor.network_grants import Grants, Layer

log = logging.getLogger(__name__)

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
LINE_LIMIT = 1 << 20
NOTES_KEPT = 20
RECONNECT_S = 0.5
MIN_TOKEN_CHARS = 32
RECONNECT_MAX_S = 30.0


class EgressUnavailable(ExecutorError):
    """The egress proxy did not start (or cannot, with this backend); the message says why,
    and the command line prints it as it prints the executor's failures."""


class DoorKeeper(Protocol):
    """The conversation service, as the link sees it (`bot.conversations.doors.Doors`)."""

    def network_grants(self, key: ConversationKey) -> Grants: ...

    async def door_closed(
        self, key: ConversationKey, host: str, port: int, run: str | None = None
    ) -> object: ...

    def network_traffic(
        self,
        key: ConversationKey,
        host: str,
        port: int,
        verdict: Verdict,
        requests: int = 1,
        sent: int = 0,
    ) -> None: ...


def doors_answer(number: int, grants: Grants | None) -> dict[str, Any]:
    """The answer to the proxy's question `number`: the owner and its doors by layer."""
    if grants is None:
        return {"answer": number, "owner": None}
    layers: dict[str, list[str]] = {layer.value: [] for layer in Layer}
    for grant in grants.grants:
        layers[grant.layer.value].append(str(grant.pattern))
    return {"answer": number, "owner": grants.conversation, **layers}


class EgressLink:
    """Starts the proxy on `listen`, answers its questions, and hears what it did."""

    def __init__(
        self,
        executor: Executor,
        doors: DoorKeeper,
        private_allowed: str = "",
        proxy_args: Sequence[str] = (),
        metrics: Metrics | None = None,
    ) -> None:
        self.metrics = metrics
        self.executor = executor
        self.doors = doors
        self.private_allowed = private_allowed
        self.proxy_args = tuple(proxy_args)
        """More options for the proxy (secrets, its CA's folder, pinned names)."""
        self.address: tuple[str, int] | None = None
        self._process: asyncio.subprocess.Process | None = None
        self._to_proxy: asyncio.StreamWriter | None = None
        self._server: asyncio.Server | None = None
        self._reader: asyncio.Task[None] | None = None
        self._cards: set[asyncio.Task[object]] = set()
        self._notes: defaultdict[str, list[str]] = defaultdict(list)
        self._closing = False

    async def start(self, listen: tuple[str, int]) -> tuple[str, int]:
        host, port = listen
        command = [sys.executable, "-m", "egressproxy", "--parent", "--listen", f"{host}:{port}"]
        if self.private_allowed:
            command += ["--private-allowed", self.private_allowed]
        command += self.proxy_args
        self._process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=LINE_LIMIT,
        )
        try:
            self.address = await asyncio.wait_for(self._listening(), START_TIMEOUT_S)
        except (TimeoutError, EgressUnavailable) as exc:
            await self.close()
            raise EgressUnavailable(
                f"the egress proxy did not start on {host}:{port} ({exc or 'timed out'}); "
                "its own lines above say why"
            ) from None
        self._to_proxy = self._process.stdin
        self._reader = asyncio.create_task(self._read(), name="egress proxy link")
        log.info("egress proxy listening on %s:%s for the sandboxes", *self.address)
        return self.address

    async def connect(
        self, proxy: tuple[str, int], control: tuple[str, int], token: str
    ) -> tuple[str, int]:
        """Talk to a proxy that runs on its own (a Deployment) at `proxy`, over its control
        port, showing `token`; the link connects again whenever the connection drops."""
        self.address = proxy
        try:
            reader = await asyncio.wait_for(self._hello(control, token), START_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            raise EgressUnavailable(
                f"could not reach the egress proxy's control port {control[0]}:{control[1]} "
                f"({exc or 'timed out'})"
            ) from None
        self._reader = asyncio.create_task(
            self._keep_connected(reader, control, token), name="egress proxy link"
        )
        log.info("talking to the egress proxy at %s:%s for the sandboxes", *proxy)
        return proxy

    async def accept(
        self, proxy: tuple[str, int], listen: tuple[str, int], token: str
    ) -> tuple[str, int]:
        """Wait on `listen` for a proxy that runs on its own beside the engine (Compose) and
        listens for the sandboxes at `proxy`; it shows `token`. Until one is connected the
        sandboxes reach nothing."""
        self.address = proxy
        self._server = await asyncio.start_server(
            functools.partial(self._proxy_connected, token.encode()), *listen, limit=LINE_LIMIT
        )
        log.info("waiting on %s:%s for the egress proxy to connect", *listen)
        return proxy

    async def _proxy_connected(
        self, token: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            await handshake.accept(reader, writer, token)
        except (handshake.NotTheirs, ConnectionError) as exc:
            log.warning("closed a control connection that was not the egress proxy's: %s", exc)
            writer.close()
            return
        previous, self._to_proxy = self._to_proxy, writer
        if previous is not None:
            previous.close()
        log.info("the egress proxy is connected")
        try:
            await self._lines(reader)
        except (ConnectionError, ValueError):
            pass
        finally:
            if self._to_proxy is writer:
                self._to_proxy = None
                if not self._closing:
                    log.error("the egress proxy disconnected: sandboxes reach nothing now")
            writer.close()

    async def _hello(self, control: tuple[str, int], token: str) -> asyncio.StreamReader:
        reader, writer = await asyncio.open_connection(*control, limit=LINE_LIMIT)
        try:
            await handshake.initiate(reader, writer, token.encode())
        except (handshake.NotTheirs, ConnectionError) as exc:
            writer.close()
            raise OSError(f"not the egress proxy's control port: {exc}") from None
        previous, self._to_proxy = self._to_proxy, writer
        if previous is not None:
            previous.close()
        return reader

    async def _keep_connected(
        self, reader: asyncio.StreamReader, control: tuple[str, int], token: str
    ) -> None:
        backoff = RECONNECT_S
        while not self._closing:
            with contextlib.suppress(ConnectionError, ValueError):
                await self._lines(reader)
            if self._closing:
                return
            log.error("lost the egress proxy's control connection: sandboxes reach nothing now")
            while not self._closing:
                await asyncio.sleep(backoff)
                try:
                    reader = await self._hello(control, token)
                except OSError as exc:
                    backoff = min(backoff * 2, RECONNECT_MAX_S)
                    log.warning("the egress proxy's control port does not answer: %s", exc)
                    continue
                backoff = RECONNECT_S
                log.info("connected to the egress proxy's control port again")
                break

    async def _listening(self) -> tuple[str, int]:
        assert self._process is not None
        assert self._process.stdout is not None
        while line := await self._process.stdout.readline():
            message = _message(line)
            if message.get("event") == "listening":
                return str(message["host"]), int(message["port"])
        raise EgressUnavailable("it exited")

    async def _read(self) -> None:
        process = self._process
        assert process is not None
        assert process.stdout is not None
        await self._lines(process.stdout)
        await process.wait()
        if not self._closing:
            log.error(
                "the egress proxy stopped (exit %s): sandboxes reach nothing now",
                process.returncode,
            )

    async def _lines(self, reader: asyncio.StreamReader) -> None:
        """Handle the proxy's lines until its side ends."""
        while line := await reader.readline():
            message = _message(line)
            try:
                if "ask" in message:
                    await self._answer(int(message["ask"]), str(message["address"]))
                elif message.get("event") == "egress":
                    self.heard(message)
            except Exception:  # one bad line must not end the link
                log.exception("could not handle a line from the egress proxy")

    async def _answer(self, number: int, address: str) -> None:
        grants = None
        owner = self.executor.owner_of(address)
        with contextlib.suppress(ValueError):  # a session that is no conversation's: no doors
            grants = (
                None if owner is None else self.doors.network_grants(ConversationKey.parse(owner))
            )
        writer = self._to_proxy
        if writer is None or writer.is_closing():
            return  # the proxy refuses what it gets no answer for
        writer.write((json.dumps(doors_answer(number, grants)) + "\n").encode())
        await writer.drain()

    def heard(self, message: dict[str, Any]) -> None:
        """One request the proxy decided: counted, and a closed door shown."""
        owner = str(message.get("owner", ""))
        try:
            key = ConversationKey.parse(owner)
        except ValueError:
            return  # a sandbox no conversation owns (one in the pool): nobody to tell
        host, port = str(message["host"]), int(message["port"])
        allowed = message.get("verdict") == "allowed"
        verdict: Verdict = "allowed" if allowed else "refused"
        size = int(message.get("bytes_up", 0)) + int(message.get("bytes_down", 0))
        self.doors.network_traffic(key, host, port, verdict, 1, size)
        if self.metrics is not None:
            self.metrics.egress(key.id, verdict, size)
        if allowed:
            return
        reason = str(message.get("reason", f"{host}:{port} was refused"))
        notes = self._notes[key.id]
        if reason not in notes and len(notes) < NOTES_KEPT:
            notes.append(reason)
        if reason.endswith(CLOSED_DOOR):
            card = asyncio.ensure_future(self.doors.door_closed(key, host, port))
            self._cards.add(card)
            card.add_done_callback(self._card_posted)

    def _card_posted(self, card: asyncio.Future[object]) -> None:
        self._cards.discard(card)
        if not card.cancelled() and card.exception() is not None:
            log.warning("could not post a network card: %s", card.exception())

    def take_notes(self, conversation: str) -> list[str]:
        """What the proxy refused to `conversation` since this was last asked, each once."""
        return self._notes.pop(conversation, [])

    async def close(self) -> None:
        self._closing = True
        if self._server is not None:
            self._server.close()
            if self._to_proxy is not None:
                self._to_proxy.close()
            await self._server.wait_closed()
            self._server = None
        process = self._process
        if process is not None:
            if process.stdin is not None:
                process.stdin.close()  # the proxy stops when its stdin ends
            try:
                await asyncio.wait_for(process.wait(), STOP_TIMEOUT_S)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        if self._process is None and self._to_proxy is not None:
            self._to_proxy.close()
            with contextlib.suppress(ConnectionError, OSError):
                await self._to_proxy.wait_closed()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        for card in list(self._cards):
            card.cancel()
        self._process = None
        self._to_proxy = None


def _message(line: bytes) -> dict[str, Any]:
    try:
        found = json.loads(line)
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def proxy_options(network: NetworkSettings, data_dir: Path) -> tuple[str, list[str]]:
    """The sandboxes' extra CA (PEM, '' without secrets) and the proxy's options for the
    operator's network settings: secrets mean TLS terminated with the installation's CA."""
    if not network.secrets_file:
        return "", []
    from egressproxy.ca import installation_ca

    confdir = data_dir / "egress-ca"
    options = ["--secrets", network.secrets_file, "--confdir", str(confdir)]
    if network.upstream_ca:
        options += ["--upstream-ca", network.upstream_ca]
    return installation_ca(confdir), options


async def proxy_beside_the_engine(
    network: NetworkSettings,
) -> tuple[tuple[str, int], str] | None:
    """Where the bot waits for a proxy that runs on its own beside the engine (Compose's
    `egress-proxy`), and the token it must show; None: the bot starts the proxy itself."""
    if not network.control_listen:
        return None
    host, _, port = network.control_listen.rpartition(":")
    if not host or not port.isdigit():
        raise EgressUnavailable(
            f"CELLMATE_NETWORK_CONTROL_LISTEN must be HOST:PORT, not {network.control_listen!r}"
        )
    if network.secrets_file:
        raise EgressUnavailable(
            "secrets (CELLMATE_NETWORK_SECRETS_FILE) need the proxy that the bot starts "
            "itself; a proxy beside the engine (CELLMATE_NETWORK_CONTROL_LISTEN) has none yet"
        )
    token = network.control_token.strip()
    if not token:
        try:
            path = Path(network.control_token_file)
            token = (await asyncio.to_thread(path.read_text, "utf-8")).strip()
        except (OSError, ValueError) as exc:
            raise EgressUnavailable(
                "cannot read the egress proxy's token (CELLMATE_NETWORK_CONTROL_TOKEN, or "
                f"_TOKEN_FILE): {exc}"
            ) from None
    if len(token) < MIN_TOKEN_CHARS:
        raise EgressUnavailable(
            f"the egress proxy's token has fewer than {MIN_TOKEN_CHARS} characters"
        )
    return (host.strip("[]"), int(port)), token


def cluster_proxy_ca(path: str) -> str:
    """The certificate (PEM) of the CA a proxy Deployment adds secrets with, '' when it has
    none (the file is an optional Secret's)."""
    try:
        return Path(path).read_text(encoding="ascii") if path else ""
    except FileNotFoundError:
        return ""
    except (OSError, UnicodeDecodeError) as exc:
        raise EgressUnavailable(f"cannot read the egress proxy's CA at {path}: {exc}") from None


async def start_egress(
    executor: Executor,
    doors: DoorKeeper,
    proxy_port: int,
    private_allowed: str,
    proxy_args: Sequence[str] = (),
    metrics: Metrics | None = None,
    control: tuple[tuple[str, int], str] | None = None,
) -> EgressLink:
    """The egress proxy for `executor`'s sandboxes, listening where they can reach it: the
    bot's child on Docker, or with `control` (where to listen, the token) a proxy beside the
    engine that connects to the bot (Compose); the Deployment of
    deploy/kubernetes/egress-proxy.yaml on a cluster."""
    backend = executor.backend
    if isinstance(backend, KubernetesBackend):
        return await connect_egress(backend, executor, doors, private_allowed, proxy_args, metrics)
    if not isinstance(backend, DockerBackend):
        raise EgressUnavailable(
            "CELLMATE_NETWORK=allowlist needs the Docker or the Kubernetes backend"
        )
    network = await backend.egress_network(proxy_port)
    link = EgressLink(executor, doors, private_allowed, proxy_args, metrics)
    if control is None:
        await link.start(await network.proxy_address())
        return link
    listen, token = control
    await link.accept(await network.proxy_address(), listen, token)
    return link


async def connect_egress(
    backend: KubernetesBackend,
    executor: Executor,
    doors: DoorKeeper,
    private_allowed: str,
    proxy_args: Sequence[str],
    metrics: Metrics | None,
) -> EgressLink:
    """The link to the egress proxy's Deployment, over its control port."""
    if private_allowed or proxy_args:
        raise EgressUnavailable(
            "on Kubernetes the egress proxy's own Deployment holds its private doors (its "
            "arguments) and secrets (the Secret cellmate-egress-secrets), see "
            "deploy/kubernetes/egress-proxy.yaml: set them there, not on the bot"
        )
    settings = backend.settings
    try:
        proxy = egress_address(settings.egress_proxy, "proxy")
        control = egress_address(settings.egress_control, "control")
    except ValueError as exc:
        raise EgressUnavailable(f"CELLMATE_KUBERNETES_EGRESS_*: {exc}") from None
    if proxy is None or control is None:
        raise EgressUnavailable(
            "CELLMATE_NETWORK=allowlist on Kubernetes needs the egress proxy's Service "
            "(kubectl apply -k deploy/kubernetes, then restart the bot so that its Pod sees "
            "the Service), or CELLMATE_KUBERNETES_EGRESS_PROXY and _CONTROL"
        )
    try:
        found = await asyncio.to_thread(Path(settings.egress_token_file).read_text, "utf-8")
    except OSError as exc:
        raise EgressUnavailable(
            f"cannot read the egress proxy's control token ({exc}): the Secret "
            "cellmate-egress-token, mounted as CELLMATE_KUBERNETES_EGRESS_TOKEN_FILE"
        ) from None
    link = EgressLink(executor, doors, metrics=metrics)
    await link.connect(proxy, control, found.strip())
    return link
