"""The bot's MCP endpoint (streamable HTTP, served by the MCP SDK inside the bot's event loop):
a coding agent's tools act in one conversation as the person whose token it holds.

Every request carries `Authorization: Bearer <token>`; one without a known, unrevoked token
is refused before the SDK sees it. Each tool call checks the token's person against the
conversation's place again (they may no longer be allowed there), then goes through the
conversation layer as the person's own `/run` would: the place's approval policy (the
agent's code is not the person's own decision, so under `approve` it waits for a yes in the
thread), the quotas, the network grants, and the thread shows what ran and its output."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings

from bot.agent import UserMessage
from bot.conversations import Conversations
from bot.conversations.keys import ConversationKey
from bot.conversations.mcp_tokens import Grant, TokenStore
from bot.conversations.reply import Reply
from bot.conversations.schedule_runs import Poster
from bot.errors import NotHere, NotYours
from bot.events import (
    Answer,
    ApprovalDecided,
    ApprovalRequested,
    ArtifactsPublished,
    ExecutionFinished,
    Failure,
    OutputChunk,
    TurnEvent,
)
from bot.mcp.bridge import endpoint_url
from executor import InvalidInput

log = logging.getLogger(__name__)

PATH = "/mcp"
MAX_FILE_BYTES = 25_000_000
"""The most read_file and write_file move at once, as an attachment may be."""
GRACE_S = 1
"""On stop, how long the endpoint waits for open requests and streams before closing them
(the bot's turns were drained before)."""
OUTPUT_CHARS = 20_000
"""The most of a run's output a tool result carries (the thread has all of it)."""

MISSING = (
    "No token: send 'Authorization: Bearer <token>'. Type /mcp token in the conversation the "
    "agent should work in to get one."
)
UNKNOWN = "This token is not known here: type /mcp token in the conversation for a new one."
REVOKED = "This token was revoked (/mcp revoke): type /mcp token for a new one."
NOT_ALLOWED = (
    "The token's person may no longer act in its conversation (the bot's allowlist or the "
    "conversation's members changed)."
)
PLATFORM_DOWN = "The conversation's platform ({platform}) is not connected to the bot now."


def bearer(headers: Any) -> str:
    value = str(headers.get("authorization") or "") if headers is not None else ""
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def token_refusal(tokens: TokenStore, token: str) -> tuple[Grant | None, str]:
    """The token's grant, or why it does not let anyone in."""
    if not token:
        return None, MISSING
    grant = tokens.find(token)
    if grant is None:
        return None, UNKNOWN
    if grant.revoked:
        return None, REVOKED
    return grant, ""


def heading(name: str) -> str:
    """What the thread says before an agent's run."""
    return "🤖 Run by your agent:" if name == "you" else f"🤖 Run by {name}'s agent:"


@dataclass
class Outcome:
    """What one agent's run showed, for its tool result."""

    output: list[str] = field(default_factory=list)
    status: str = ""
    files: list[str] = field(default_factory=list)
    answer: str = ""
    refused: str = ""
    verdict: str = ""

    def text(self) -> str:
        if self.refused:
            raise ToolError(self.refused)
        if self.verdict and self.verdict not in ("run", "edited"):
            raise ToolError(self.answer or f"The code was not run ({self.verdict}).")
        if not self.status:
            raise ToolError(self.answer or "The code did not run.")
        output = "".join(self.output)
        if len(output) > OUTPUT_CHARS:
            output = "…" + output[-OUTPUT_CHARS:]
        lines = [output.rstrip("\n"), f"[status: {self.status}]"]
        if self.verdict == "edited":
            lines.insert(0, "[a person edited the code before it ran]")
        lines.extend(f"[file: {name}]" for name in self.files)
        return "\n".join(line for line in lines if line)


class AgentReply:
    """The platform's reply in the thread, with what the run showed recorded for the agent."""

    def __init__(self, inner: Reply) -> None:
        self.inner = inner
        self.outcome = Outcome()
        self.asked: set[str] = set()
        """The keys of the cards that asked about the agent's code."""

    async def queued(self, stop: str, text: str) -> None:
        await self.inner.queued(stop, text)

    async def start(self, stop: str) -> None:
        await self.inner.start(stop)

    def __call__(self, event: TurnEvent) -> Awaitable[None] | None:
        seen = self.outcome
        if isinstance(event, OutputChunk):
            output = event.output
            if output.kind in ("stdout", "stderr"):
                seen.output.append(output.text)
            elif output.result is not None:
                seen.output.append(output.result.text + "\n")
            elif output.error is not None:
                seen.output.append(f"{output.error.name}: {output.error.value}\n")
        elif isinstance(event, ExecutionFinished):
            seen.status = str(event.status)
            if event.message:
                seen.output.append(event.message + "\n")
        elif isinstance(event, ArtifactsPublished):
            for artifact in event.artifacts:
                seen.files.append(
                    f"{artifact.name} {artifact.link}" if artifact.link else artifact.name
                )
        elif isinstance(event, ApprovalRequested) and event.code:
            self.asked.add(event.key)
        elif isinstance(event, ApprovalDecided) and event.key in self.asked:
            seen.verdict = event.verdict  # of the code (a card for saved variables only: not)
        elif isinstance(event, Answer):
            seen.answer = event.text
        elif isinstance(event, Failure):
            seen.refused = event.message
        return self.inner(event)

    async def finish(self, rerun: str | None, notices: Sequence[str]) -> None:
        await self.inner.finish(rerun, notices)

    async def refused(self, text: str) -> None:
        self.outcome.refused = text
        await self.inner.refused(text)

    async def failed(self, text: str) -> None:
        self.outcome.refused = text
        await self.inner.failed(text)


class AgentTools:
    """The tools, each acting for the person whose token the request carries."""

    def __init__(self, conversations: Conversations, tokens: TokenStore) -> None:
        self.conversations = conversations
        self.tokens = tokens

    async def _where(self, ctx: Context) -> tuple[Grant, ConversationKey, Poster]:
        grant, why = token_refusal(self.tokens, bearer(ctx.headers))
        if grant is None:
            raise ToolError(why)
        key = ConversationKey.parse(grant.conversation)
        poster = self.conversations.posters.get(key.platform)
        if poster is None:
            raise ToolError(PLATFORM_DOWN.format(platform=key.platform))
        person = await poster.person(grant.user, key)
        if person.user != grant.user:
            raise ToolError(NOT_ALLOWED)  # a platform that no longer knows the person
        try:
            await self.conversations.check(poster.door, person, key)
        except (NotHere, NotYours) as exc:
            raise ToolError(NOT_ALLOWED) from exc
        return grant, key, poster

    async def run_code(self, code: str, ctx: Context) -> str:
        grant, key, poster = await self._where(ctx)
        person = await poster.person(grant.user, key)
        await poster.say(key, heading(grant.name))
        reply = AgentReply(await poster.reply_in(key, grant.user))
        message = UserMessage(f"/run\n{code}", user=grant.user, server=grant.server, agent=True)
        await self.conversations.turn(poster.door, person, key, message, reply)
        return reply.outcome.text()

    async def list_files(self, ctx: Context) -> str:
        grant, key, poster = await self._where(ctx)
        person = await poster.person(grant.user, key)
        listing = await self.conversations.files(poster.door, person, key)
        if not listing.files:
            return "No files in /mnt/data yet."
        lines = [listing.heading] if listing.heading else []
        lines.extend(f"{path}\t{size} B" for path, size in listing.files)
        return "\n".join(lines)

    async def read_file(self, path: str, ctx: Context) -> str:
        _, key, _ = await self._where(ctx)
        session = self.conversations.agent.executor.session(key.id)
        if not session.active:
            raise ToolError("No session is live in this conversation: run some code first.")
        name = path.removeprefix("/mnt/data/")
        with _told():
            size = dict(await session.list_files()).get(name)
            if size is None:
                raise ToolError(f"No file {path!r} in /mnt/data.")
            if size > MAX_FILE_BYTES:
                raise ToolError(
                    f"{path} is {size} B; read_file returns at most {MAX_FILE_BYTES} B."
                )
            data = await session.get_file(name)
        if data is None:
            raise ToolError(f"No file {path!r} in /mnt/data.")
        try:
            return data.decode()
        except UnicodeDecodeError as exc:
            raise ToolError(f"{path} is not UTF-8 text ({size} B).") from exc

    async def write_file(self, path: str, content: str, ctx: Context) -> str:
        _, key, _ = await self._where(ctx)
        data = content.encode()
        if len(data) > MAX_FILE_BYTES:
            raise ToolError(f"write_file takes at most {MAX_FILE_BYTES} B.")
        name = path.removeprefix("/mnt/data/")
        with _told():
            await self.conversations.agent.executor.session(key.id).put_files({name: data})
        return f"Wrote /mnt/data/{name} ({len(data)} B)."

    async def export_notebook(self, ctx: Context) -> str:
        grant, key, poster = await self._where(ctx)
        person = await poster.person(grant.user, key)
        notebook = await self.conversations.export(poster.door, person, key)
        if notebook is None:
            raise ToolError("No code has run in this conversation yet.")
        return json.dumps(notebook)


@contextlib.contextmanager
def _told() -> Iterator[None]:
    """A refusal of the sandbox's (a path outside /mnt/data, too many files), for the agent."""
    try:
        yield
    except InvalidInput as exc:
        raise ToolError(str(exc)) from exc


def build(conversations: Conversations, tokens: TokenStore) -> MCPServer[Any]:
    tools = AgentTools(conversations, tokens)
    server: MCPServer[Any] = MCPServer(
        "cellmate",
        instructions=(
            "Runs Python in a Cellmate conversation's Jupyter kernel, shared with the people in "
            "that chat thread: they see each run and its output."
        ),
    )
    server.add_tool(
        tools.run_code,
        name="run_code",
        description=(
            "Run Python in the conversation's kernel (variables persist between runs; files "
            "live in /mnt/data). Returns the output, the status and the files the run made."
        ),
    )
    server.add_tool(
        tools.list_files, name="list_files", description="The files in /mnt/data, with sizes."
    )
    server.add_tool(
        tools.read_file, name="read_file", description="A text file from /mnt/data (UTF-8)."
    )
    server.add_tool(
        tools.write_file,
        name="write_file",
        description="Write a text file into /mnt/data (a path may have folders).",
    )
    server.add_tool(
        tools.export_notebook,
        name="export_notebook",
        description="Every cell run so far in the conversation, with outputs, as nbformat JSON.",
    )
    return server


ASGIApp = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


def guarded(app: ASGIApp, tokens: TokenStore) -> ASGIApp:
    """`app`, reached only with a known, unrevoked bearer token; otherwise 401 with a
    JSON-RPC error that the agent's client shows."""

    async def guard(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        _, why = token_refusal(tokens, bearer(headers))
        if not why:
            await app(scope, receive, send)
            return
        body = json.dumps(
            {"jsonrpc": "2.0", "id": None, "error": {"code": -32001, "message": why}}
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"www-authenticate", b'Bearer realm="cellmate"'),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    return guard


class _InLoop(uvicorn.Server):
    """Uvicorn inside the bot's loop: the bot's own signal handling stays."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class McpEndpoint:
    """The streamable HTTP endpoint, started and stopped with the bot's services."""

    def __init__(
        self, conversations: Conversations, tokens: TokenStore, host: str, port: int
    ) -> None:
        self.conversations = conversations
        self.tokens = tokens
        self.host = host
        self.port = port
        self._server: _InLoop | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return endpoint_url(self.host, self.port)

    async def start(self) -> None:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError:
            sock.close()
            raise
        self.port = sock.getsockname()[1]
        mcp = build(self.conversations, self.tokens)
        loopback = self.host in ("127.0.0.1", "localhost", "::1")
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=loopback,
            allowed_hosts=[
                f"127.0.0.1:{self.port}",
                f"localhost:{self.port}",
                f"[::1]:{self.port}",
            ],
        )
        app = mcp.streamable_http_app(
            streamable_http_path=PATH, transport_security=security, host=self.host
        )
        config = uvicorn.Config(
            guarded(app, self.tokens),
            log_config=None,
            access_log=False,
            lifespan="on",
            # An agent's client keeps a stream open between calls: it is not waited for.
            timeout_graceful_shutdown=GRACE_S,
        )
        self._server = _InLoop(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        async with asyncio.timeout(10):
            while not self._server.started:
                if self._task.done():
                    self._task.result()
                    raise RuntimeError("the MCP endpoint stopped as it started")
                await asyncio.sleep(0.01)
        log.info("MCP endpoint at %s", self.url)

    async def stop(self) -> None:
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        try:
            async with asyncio.timeout(10):
                await self._task
        except TimeoutError:
            self._server.force_exit = True
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._server = self._task = None
