"""DiscordServer: the aiohttp app that puts the gateway and REST routes together."""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from typing import Any

from aiohttp import web

from .channels import Channels
from .commands import Commands
from .webhooks import Webhooks
from .world import ALICE, API_PREFIX, BOT_ID, Message, iso


class DiscordServer(Channels, Commands, Webhooks):
    """Discord for one guild, its users and one bot; see the package docstring."""

    # ── lifecycle ─────────────────────────────────────────────────────────

    async def start(self) -> None:
        app = web.Application(middlewares=[self._middleware], client_max_size=64 * 1024 * 1024)
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get("/attachments/{channel_id}/{attachment_id}/{filename}", self._cdn)
        for method, path, handler in self._routes():
            app.router.add_route(method, API_PREFIX + path, handler)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()

    async def close(self) -> None:
        for ws in list(self._sockets):
            await ws.close(code=1001)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def _routes(self) -> list[tuple[str, str, Callable[[web.Request], Any]]]:
        commands = "/applications/{application_id}/commands"
        guild_commands = "/applications/{application_id}/guilds/{guild_id}/commands"
        message = "/channels/{channel_id}/messages/{message_id}"
        webhook_message = "/webhooks/{application_id}/{token}/messages/{message_id}"
        return [
            ("GET", "/gateway/bot", self._get_gateway_bot),
            ("GET", "/users/@me", self._get_me),
            ("GET", "/oauth2/applications/@me", self._get_application),
            ("GET", "/guilds/{guild_id}/members/{user_id}", self._get_member),
            ("PUT", commands, self._put_commands),
            ("PUT", guild_commands, self._put_commands),
            ("POST", "/channels/{channel_id}/messages", self._post_message),
            ("GET", message, self._get_message),
            ("PATCH", message, self._patch_message),
            ("POST", message + "/threads", self._post_message_thread),
            ("POST", "/interactions/{interaction_id}/{token}/callback", self._callback),
            ("POST", "/webhooks/{application_id}/{token}", self._post_followup),
            ("PATCH", webhook_message, self._patch_webhook_message),
        ]

    # ── what users do ─────────────────────────────────────────────────────

    async def post_message(
        self,
        channel_id: int,
        content: str,
        *,
        author: int = ALICE,
        mention_bot: bool = False,
        attachments: Sequence[tuple[str, bytes]] = (),
        reply_to: int | Message | None = None,
        linked: Sequence[tuple[str, str]] = (),
    ) -> Message:
        """A user posts a message (in a channel, thread or DM); the bot gets MESSAGE_CREATE.
        `linked` attachments are (filename, url): files that claim to be at `url`."""
        self._require_channel(channel_id)
        if mention_bot:
            content = f"<@{BOT_ID}> {content}"
        reference = self._require_message(reply_to) if reply_to is not None else None
        users, roles, everyone = self._parse_mentions(content, None, author, reference)
        message = Message(
            id=self._ids.next(),
            channel_id=channel_id,
            author_id=author,
            content=content,
            attachments=[self._store_file(name, data) for name, data in attachments]
            + [self._store_file(name, b"", url=url) for name, url in linked],
            reference_id=reference.id if reference else None,
            type=19 if reference else 0,
            mentions=users,
        )
        message._meta.update(mention_roles=roles, mention_everyone=everyone)
        await self._publish(message)
        return message

    async def dm_channel(self, user: int = ALICE) -> int:
        """The id of the user's DM channel with the bot, opened if need be."""
        return int(self._open_dm_channel(user)["id"])

    async def edit_message(self, message_id: int, content: str) -> None:
        """The author edits their message; the bot gets MESSAGE_UPDATE."""
        message = self._require_message(message_id)
        reference = self.messages.get(message.reference_id or 0)
        if content != message.content:
            message.edits.append(message.content)
            message.content = content
        users, roles, everyone = self._parse_mentions(content, None, message.author_id, reference)
        message.mentions = users
        message._meta.update(mention_roles=roles, mention_everyone=everyone, edited=iso())
        await self._updated(message)
