"""Where a turn's messages go (a channel, or an interaction), and the reply to one turn.

An interaction's token lasts 15 minutes; after that (or when Discord refuses the token) the
reply carries on as ordinary channel messages, so a long turn still gets its answer.
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

import discord

from bot.events import ApprovalDecided, ApprovalRequested, InputAnswered, InputRequested
from bot.platforms.on_discord.approval import (
    approval_view,
    decided_text,
    request_files,
    request_text,
)
from bot.platforms.on_discord.prompts import answered_text, input_view, prompt_text
from bot.platforms.on_discord.render import MARKS, Outgoing, answer_messages, progress_text
from bot.platforms.turn_reply import TurnReply

log = logging.getLogger(__name__)

TOKEN_LIFETIME_S = 14 * 60
"""Use an interaction's token for a little less than Discord's 15 minutes."""
EXPIRED_TOKEN_CODES = {50027, 10015, 10062}
"""Invalid webhook token, unknown webhook, unknown interaction."""


class Surface(Protocol):
    async def send(
        self, content: str, files: list[tuple[str, bytes]] | None = None, view: Any = None
    ) -> Any:
        """Post a message; return something `edit` takes."""

    async def edit(self, message: Any, content: str, view: Any = None) -> Any:
        """Change a posted message's text and buttons; return the message."""

    async def notify(self, content: str) -> None:
        """A short message for the user only where the platform allows it."""


def _files(files: list[tuple[str, bytes]] | None) -> list[discord.File]:
    return [discord.File(io.BytesIO(content), filename=name) for name, content in files or ()]


class ChannelSurface:
    """Messages in a channel, thread or DM; the first one replies to `reference`."""

    def __init__(
        self, channel: discord.abc.Messageable, reference: discord.Message | None = None
    ) -> None:
        self.channel = channel
        self.reference = reference

    async def send(
        self, content: str, files: list[tuple[str, bytes]] | None = None, view: Any = None
    ) -> discord.Message:
        extra: dict[str, Any] = {}
        if self.reference is not None:
            extra["reference"] = self.reference
            extra["mention_author"] = False
            self.reference = None
        if view is not None:
            extra["view"] = view
        return await self.channel.send(content, files=_files(files), suppress_embeds=True, **extra)

    async def edit(self, message: Any, content: str, view: Any = None) -> Any:
        # An edit without `suppress` would turn link previews back on.
        return await message.edit(content=content, view=view, suppress=True)

    async def notify(self, content: str) -> None:
        await self.send(content)


class InteractionSurface:
    """The deferred response to an interaction, then follow-ups; channel messages after the
    token expired."""

    def __init__(self, interaction: discord.Interaction) -> None:
        self.interaction = interaction
        self.started = time.monotonic()
        self._original_used = False
        self._fallback: ChannelSurface | None = None

    @property
    def expired(self) -> bool:
        return self._fallback is not None or time.monotonic() - self.started > TOKEN_LIFETIME_S

    def _channel(self) -> ChannelSurface:
        if self._fallback is None:
            channel = self.interaction.channel
            if not isinstance(channel, discord.abc.Messageable):
                raise RuntimeError("the interaction's channel cannot take messages")
            self._fallback = ChannelSurface(channel)
        return self._fallback

    async def send(
        self, content: str, files: list[tuple[str, bytes]] | None = None, view: Any = None
    ) -> Any:
        if not self.expired:
            try:
                extra: dict[str, Any] = {} if view is None else {"view": view}
                if not self._original_used:
                    self._original_used = True
                    return await self.interaction.edit_original_response(
                        content=content, attachments=_files(files), **extra
                    )
                return await self.interaction.followup.send(
                    content, files=_files(files), wait=True, **extra
                )
            except discord.HTTPException as exc:
                if not _token_gone(exc):
                    raise
                log.info("interaction token no longer valid; answering in the channel")
        return await self._channel().send(content, files, view)

    async def edit(self, message: Any, content: str, view: Any = None) -> Any:
        if isinstance(message, discord.WebhookMessage | discord.InteractionMessage):
            if self.expired:
                return message  # the token cannot edit it any more; the next send goes anew
            try:
                return await message.edit(content=content, view=view)
            except discord.HTTPException as exc:
                if not _token_gone(exc):
                    raise
                self._channel()
                return message
        return await message.edit(content=content, view=view, suppress=True)

    async def notify(self, content: str) -> None:
        if not self.expired:
            try:
                await self.interaction.followup.send(content, ephemeral=True)
                return
            except discord.HTTPException as exc:
                if not _token_gone(exc):
                    raise
        await self._channel().send(content)


def _token_gone(exc: discord.HTTPException) -> bool:
    return exc.status == 401 or exc.code in EXPIRED_TOKEN_CODES


class Reply(TurnReply[Any]):
    """One turn on Discord (see `TurnReply`): a progress message at once, edited at most
    once a second, then the answer with its files attached."""

    marks = MARKS
    api_error = discord.HTTPException

    def __init__(
        self,
        surface: Surface,
        upload_limit: int,
        buttons: Callable[[str, str], Any],
        interval: float = 1.0,
        max_files: int = 10,
    ) -> None:
        super().__init__(interval)
        self.surface = surface
        self.max_files = max_files
        self.upload_limit = upload_limit
        self.buttons = buttons
        """(kind, key) -> a view with that button: "stop" or "rerun"."""

    def controls(self, kind: str, key: str) -> Any:
        return self.buttons(kind, key)

    def progress_text(self) -> str:
        return progress_text(self.view)

    async def post(self, text: str, controls: Any = None) -> Any:
        return await self.surface.send(text, view=controls)

    async def edit(self, message: Any, text: str, controls: Any = None) -> Any:
        return await self.surface.edit(message, text, controls)

    async def say(self, text: str) -> None:
        await self.surface.send(text)

    async def tell(self, text: str) -> None:
        await self.surface.notify(text)

    async def ask(self, event: ApprovalRequested) -> Any:
        return await self.surface.send(
            request_text(event), request_files(event), view=approval_view(event.key)
        )

    async def decided(self, message: Any, asked: ApprovalRequested, event: ApprovalDecided) -> None:
        await self.surface.edit(message, decided_text(asked, event), None)

    async def ask_input(self, event: InputRequested) -> Any:
        return await self.surface.send(prompt_text(event), view=input_view(event.key))

    async def input_answered(
        self, message: Any, asked: InputRequested, event: InputAnswered
    ) -> None:
        await self.surface.edit(message, answered_text(asked, event), None)

    async def answer(self, rerun: Any) -> None:
        messages = answer_messages(self.view, self.upload_limit, self.max_files)
        log_text = progress_text(self.view)
        try:
            if log_text and messages and not messages[0].content and not messages[0].files:
                # A direct run: its progress message is the whole answer.
                messages.pop(0)
            if log_text:
                self.progress = await self.surface.edit(self.progress, log_text, rerun)
            else:
                # No code ran: the progress message becomes the answer's first part.
                first = messages.pop(0)
                if first.files:
                    await self.surface.edit(self.progress, "💬 Answer below.", None)
                    messages.insert(0, first)
                else:
                    self.progress = await self.surface.edit(self.progress, first.content, rerun)
        except discord.HTTPException:
            log.warning("could not update the progress message", exc_info=True)
        await self._send_answer(messages)

    async def _send_answer(self, messages: list[Outgoing]) -> None:
        for message in messages:
            try:
                await self.surface.send(message.content, message.files)
            except discord.HTTPException as exc:
                log.warning("sending the answer failed", exc_info=True)
                if not message.files:
                    raise
                # Perhaps a file was refused (size): say so, and send the text alone.
                note = f"\n\n(The files could not be attached: {exc.text or exc.status}.)"
                await self.surface.send(message.content + note)
