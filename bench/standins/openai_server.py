"""An OpenAI-compatible chat completions server on loopback, answering from a script.

Speaks the documented wire format of `POST /v1/chat/completions` (non-streaming and
`stream: true` server-sent events, with text and tool-call arguments split into as many
fragments as a reply asks, and usage in a last chunk when `stream_options` asks for it),
so the real `openai` client can be tested against it, including HTTP errors with
`Retry-After` and slow answers. It also answers as Azure OpenAI does:
`POST /openai/deployments/<deployment>/chat/completions?api-version=...` with an `api-key`
header, refusing a wrong key with Azure's error body.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from bench.standins.ports import free_port

AZURE_KEY_REFUSED = (
    "Access denied due to invalid subscription key or wrong API endpoint. Make sure to "
    "provide a valid key for an active subscription and use a correct regional API endpoint "
    "for your resource."
)


@dataclass
class Reply:
    content: str | None = None
    code: str | None = None
    finish_reason: str | None = None
    status: int = 200
    retry_after: str | None = None
    delay_s: float = 0.0
    more_code: tuple[str, ...] = ()
    """Further `python` calls in the same reply."""
    language: str | None = None
    """The calls' `language` argument (left out when None)."""
    pieces: int = 1
    """When streamed: the text and each call's arguments in this many fragments."""
    piece_delay_s: float = 0.0
    """When streamed: the pause before each fragment (a model writing slowly)."""
    unfinished: bool = False
    """When streamed: the stream ends without a finish reason (as when it breaks off)."""


def _arguments(code: str, language: str | None) -> str:
    return json.dumps({"code": code} if language is None else {"code": code, "language": language})


def says(text: str) -> Reply:
    return Reply(content=text)


def runs(code: str) -> Reply:
    return Reply(code=code)


def fails(status: int, retry_after: str | None = None) -> Reply:
    return Reply(status=status, retry_after=retry_after)


@dataclass
class ScriptedModel:
    replies: deque[Reply] = field(default_factory=deque)
    requests: list[dict[str, Any]] = field(default_factory=list)
    endless: Reply | None = None
    responder: Callable[[dict[str, Any]], Reply] | None = None
    """Answers each request from its body (for many conversations at once), when set."""
    refuse_stream_options: bool = False
    """Answer 400 to `stream_options`, as some OpenAI-compatible servers do."""
    azure_key: str = "azure-test-key"
    """The `api-key` the Azure-style routes accept."""
    paths: list[str] = field(default_factory=list)
    """The path and query of each chat completions request."""
    piece_hooks: list[Callable[[str], None]] = field(default_factory=list)
    """Called with each fragment of streamed text as it is written (benchmarks time the
    model's first token by them)."""
    port: int = 0
    _runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    async def start(self) -> ScriptedModel:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._complete)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/openai/deployments/{deployment}/chat/completions", self._azure)
        app.router.add_get("/openai/models", self._azure_models)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        self.port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _models(self, request: web.Request) -> web.Response:
        model = {"id": "scripted-model", "object": "model", "created": 0, "owned_by": "tests"}
        return web.json_response({"object": "list", "data": [model]})

    @property
    def azure_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _azure_refusal(self, request: web.Request) -> web.Response | None:
        if not request.query.get("api-version"):
            error = {"error": {"code": "404", "message": "Resource not found"}}
            return web.json_response(error, status=404)
        if request.headers.get("api-key") != self.azure_key:
            error = {"error": {"code": "401", "message": AZURE_KEY_REFUSED}}
            return web.json_response(error, status=401)
        return None

    async def _azure(self, request: web.Request) -> web.StreamResponse:
        return self._azure_refusal(request) or await self._complete(request)

    async def _azure_models(self, request: web.Request) -> web.Response:
        return self._azure_refusal(request) or await self._models(request)

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.paths.append(request.path_qs)
        if self.refuse_stream_options and "stream_options" in body:
            error = {
                "error": {
                    "message": "Unrecognized request argument supplied: stream_options",
                    "type": "invalid_request_error",
                    "param": "stream_options",
                    "code": None,
                }
            }
            return web.json_response(error, status=400)
        if self.responder is not None:
            reply: Reply | None = self.responder(body)
        else:
            reply = self.replies.popleft() if self.replies else self.endless
        if reply is None:
            return web.json_response({"error": {"message": "no scripted reply left"}}, status=500)
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        if reply.status != 200:
            headers = {"Retry-After": reply.retry_after} if reply.retry_after else {}
            error = {"error": {"message": f"scripted HTTP {reply.status}", "type": "server_error"}}
            return web.json_response(error, status=reply.status, headers=headers)
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        finish = reply.finish_reason or "stop"
        if reply.code is not None:
            message["tool_calls"] = [
                {
                    "id": f"call_{len(self.requests)}_{index}",
                    "type": "function",
                    "function": {"name": "python", "arguments": _arguments(code, reply.language)},
                }
                for index, code in enumerate((reply.code, *reply.more_code))
            ]
            finish = reply.finish_reason or "tool_calls"
        completion = {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "scripted"),
            "choices": [
                {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }
        if body.get("stream"):
            usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return await self._stream(request, completion, reply, usage)
        return web.json_response(completion)

    async def _stream(
        self, request: web.Request, completion: dict[str, Any], reply: Reply, usage: bool
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        choice = completion["choices"][0]
        head = {key: completion[key] for key in ("id", "created", "model")}
        head.update(object="chat.completion.chunk", usage=None)

        async def send(delta: dict[str, Any], finish: str | None = None) -> None:
            if reply.piece_delay_s:
                await asyncio.sleep(reply.piece_delay_s)
            for hook in self.piece_hooks if delta.get("content") else ():
                hook(delta["content"])
            chunk = {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

        await send({"role": "assistant", "content": ""})
        for piece in _pieces(choice["message"]["content"] or "", reply.pieces):
            await send({"content": piece})
        for index, call in enumerate(choice["message"].get("tool_calls", [])):
            function = call["function"]
            first, *rest = _pieces(function["arguments"], reply.pieces) or [""]
            opening = {"name": function["name"], "arguments": first}
            await send(
                {
                    "tool_calls": [
                        {"index": index, "id": call["id"], "type": "function", "function": opening}
                    ]
                }
            )
            for piece in rest:
                await send({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        await send({}, None if reply.unfinished else choice["finish_reason"])
        if usage:
            last = {**head, "choices": [], "usage": completion["usage"]}
            await response.write(f"data: {json.dumps(last)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        return response


def _pieces(text: str, count: int) -> list[str]:
    """`text` cut into `count` fragments or fewer (none when it is empty)."""
    if not text:
        return []
    size = max(1, -(-len(text) // max(1, count)))
    return [text[start : start + size] for start in range(0, len(text), size)]
