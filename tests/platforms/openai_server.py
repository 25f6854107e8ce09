"""An OpenAI-compatible chat completions server on loopback, answering from a script.

Speaks the documented wire format of `POST /v1/chat/completions` (non-streaming and
`stream: true` server-sent events), so the real `openai` client can be tested against it,
including HTTP errors with `Retry-After` and slow answers.
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

from tests.storage.azurite import free_port


@dataclass
class Reply:
    content: str | None = None
    code: str | None = None
    finish_reason: str | None = None
    status: int = 200
    retry_after: str | None = None
    delay_s: float = 0.0


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

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
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
            call_id = f"call_{len(self.requests)}"
            message["tool_calls"] = [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "python", "arguments": json.dumps({"code": reply.code})},
                }
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
            return await self._stream(request, completion)
        return web.json_response(completion)

    async def _stream(self, request: web.Request, completion: dict[str, Any]) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        choice = completion["choices"][0]
        delta = {key: value for key, value in choice["message"].items() if value is not None}
        for index, call in enumerate(delta.get("tool_calls", [])):
            call["index"] = index
        chunk = {**completion, "object": "chat.completion.chunk"}
        chunk["choices"] = [{"index": 0, "delta": delta, "finish_reason": None}]
        await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        chunk["choices"] = [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]
        await response.write(f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode())
        return response
