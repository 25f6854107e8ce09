"""The model client: OpenAI, Azure OpenAI, or any OpenAI-compatible server (Ollama, vLLM,
LM Studio), and one reply from it, streamed or whole.

The client retries 429 and 5xx itself, honouring Retry-After, a bounded number of times.
A streamed reply is assembled from its chunks: text as it grows, tool calls from their
fragments (index, id, name, argument pieces), the finish reason and, where the server
sends it, the usage.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast

import openai

log = logging.getLogger(__name__)
OnText = Callable[[str], Awaitable[None]]


class EmptyReply(openai.OpenAIError):
    """The model answered with nothing to use."""


@dataclass(frozen=True, slots=True)
class Function:
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    function: Function


@dataclass(frozen=True, slots=True)
class Reply:
    """One reply of the model, however it came."""

    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class Completions:
    """Asks one model for replies; remembers whether its server takes `stream_options`."""

    def __init__(self, client: openai.AsyncOpenAI, model: str, stream: bool = True) -> None:
        self.client = client
        self.model = model
        self.stream = stream
        self._usage_in_stream = True

    async def reply(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        on_text: OnText | None = None,
    ) -> Reply:
        """The model's reply; `on_text` gets the text so far as it is written (streaming)."""
        if not self.stream:
            return await self._whole(messages, tools)
        try:
            return await self._streamed(messages, tools, on_text, self._usage_in_stream)
        except openai.BadRequestError as exc:
            if not self._usage_in_stream or "stream_options" not in str(exc):
                raise
            log.info("the model server refuses stream_options; streaming without usage")
            self._usage_in_stream = False
            return await self._streamed(messages, tools, on_text, False)

    def _options(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> dict[str, Any]:
        # Messages are plain dicts in the OpenAI wire format (they round-trip through SQLite).
        options: dict[str, Any] = {"model": self.model, "messages": cast(Any, messages)}
        if tools:
            options.update(tools=cast(Any, tools), tool_choice="auto")
        return options

    async def _whole(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> Reply:
        response = await self.client.chat.completions.create(**self._options(messages, tools))
        if not response.choices:
            raise EmptyReply("the model sent no choices")
        choice = response.choices[0]
        usage = response.usage
        return Reply(
            content=choice.message.content or "",
            tool_calls=[
                ToolCall(call.id, Function(call.function.name, call.function.arguments))
                for call in choice.message.tool_calls or []
                if call.type == "function"
            ],
            finish_reason=choice.finish_reason,
            prompt_tokens=usage.prompt_tokens if usage else None,
            completion_tokens=usage.completion_tokens if usage else None,
        )

    async def _streamed(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        on_text: OnText | None,
        usage_wanted: bool,
    ) -> Reply:
        options = self._options(messages, tools)
        if usage_wanted:
            options["stream_options"] = {"include_usage": True}
        assembly = _Assembly()
        stream = await self.client.chat.completions.create(stream=True, **options)
        async with stream:
            async for chunk in stream:
                if assembly.add(chunk) and on_text is not None:
                    await on_text(assembly.text)
        return assembly.reply()


@dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class _Assembly:
    """A streamed reply, chunk by chunk."""

    parts: list[str] = field(default_factory=list)
    calls: dict[int, _Call] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: tuple[int, int] | None = None
    chunks: int = 0

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def add(self, chunk: Any) -> bool:
        """Take one chunk; True when the text grew."""
        self.chunks += 1
        if chunk.usage is not None:
            self.usage = (chunk.usage.prompt_tokens or 0, chunk.usage.completion_tokens or 0)
        grew = False
        for choice in chunk.choices or ():
            if choice.index != 0:
                continue
            delta = choice.delta
            if delta is not None and delta.content:
                self.parts.append(delta.content)
                grew = True
            for fragment in (delta.tool_calls if delta is not None else None) or ():
                self._fragment(fragment)
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason
        return grew

    def _fragment(self, fragment: Any) -> None:
        index = fragment.index
        if index is None:
            # Without an index, a fragment's id names its call; a fragment with neither
            # continues the newest call (servers that omit both send one call in a row).
            known = [i for i, call in self.calls.items() if fragment.id and call.id == fragment.id]
            if known:
                index = known[0]
            elif fragment.id or not self.calls:
                index = len(self.calls)
            else:
                index = max(self.calls)
        call = self.calls.setdefault(index, _Call())
        if fragment.id and not call.id:
            call.id = fragment.id
        function = fragment.function
        if function is not None:
            if function.name and not call.name:
                call.name = function.name
            if function.arguments:
                call.arguments.append(function.arguments)

    def reply(self) -> Reply:
        if not self.chunks:
            raise EmptyReply("the model sent an empty stream")
        calls = [
            ToolCall(
                call.id or f"call_{uuid.uuid4().hex[:12]}",
                Function(call.name, "".join(call.arguments)),
            )
            for _, call in sorted(self.calls.items())
        ]
        prompt, completion = self.usage if self.usage is not None else (None, None)
        return Reply(self.text, calls, self.finish_reason, prompt, completion)
