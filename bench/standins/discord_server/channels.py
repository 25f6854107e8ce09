"""Channel routes: the bot's messages, threads started from them, and the attachment CDN."""

from __future__ import annotations

from aiohttp import web

from .payloads import DiscordError, form_error, json_response
from .rest import Rest, read_body
from .world import (
    BOT_ID,
    DM,
    GUILD_ID,
    GUILD_TEXT,
    GUILDS,
    HAS_THREAD,
    JSON,
    PRIVATE_THREAD,
    PUBLIC_THREAD,
    iso,
)


class Channels(Rest):
    """Channels, their messages and threads, as the bot reads and changes them."""

    def _new_thread(self, parent: JSON, thread_id: int, payload: JSON, kind: int) -> JSON:
        name = payload.get("name")
        if not isinstance(name, str) or not 1 <= len(name) <= 100:
            raise form_error(
                ["name"], "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 100 in length."
            )
        duration = payload.get("auto_archive_duration", 4320)
        if duration not in (60, 1440, 4320, 10080):
            raise form_error(
                ["auto_archive_duration"],
                "BASE_TYPE_CHOICES",
                "Value must be one of {60, 1440, 4320, 10080}.",
            )
        now = iso()
        thread: JSON = {
            "id": str(thread_id),
            "type": kind,
            "guild_id": str(GUILD_ID),
            "parent_id": parent["id"],
            "owner_id": str(BOT_ID),
            "name": name,
            "last_message_id": None,
            "message_count": 0,
            "member_count": 1,
            "total_message_sent": 0,
            "rate_limit_per_user": int(payload.get("rate_limit_per_user") or 0),
            "flags": 0,
            "thread_metadata": {
                "archived": False,
                "auto_archive_duration": duration,
                "archive_timestamp": now,
                "locked": False,
                "create_timestamp": now,
            },
        }
        if kind == PRIVATE_THREAD:
            thread["thread_metadata"]["invitable"] = bool(payload.get("invitable", True))
        self.threads[thread_id] = thread
        self._channels[thread_id] = thread
        return thread

    def _thread_member(self, thread_id: int) -> JSON:
        return {
            "id": str(thread_id),
            "user_id": str(BOT_ID),
            "join_timestamp": self.threads[thread_id]["thread_metadata"]["create_timestamp"],
            "flags": 1,
        }

    async def _thread_created(self, thread_id: int) -> JSON:
        """THREAD_CREATE to the bot, which owns (and so is a member of) the new thread;
        returns the thread as the REST API answers its creation."""
        thread = {**self.threads[thread_id], "member": self._thread_member(thread_id)}
        await self._dispatch("THREAD_CREATE", {**thread, "newly_created": True}, intent=GUILDS)
        return thread

    # ── REST: channels and messages ──────────────────────────────────────

    async def _post_message(self, request: web.Request) -> web.Response:
        channel = self._channel(request)
        payload, uploads = await read_body(request)
        if channel["type"] == DM and channel["recipients"][0].get("bot"):
            raise DiscordError(403, 50007, "Cannot send messages to this user")
        await self._reopen_thread(channel)
        message = self._compose(int(channel["id"]), payload, uploads)
        await self._publish(message)
        return json_response(message.raw)

    async def _reopen_thread(self, channel: JSON) -> None:
        """Sending to an archived thread unarchives it, unless it is locked."""
        metadata = channel.get("thread_metadata")
        if metadata is None or not metadata["archived"]:
            return
        if metadata["locked"]:
            raise DiscordError(400, 50083, "Thread is archived")
        metadata["archived"] = False
        metadata["archive_timestamp"] = iso()
        await self._dispatch("THREAD_UPDATE", channel, intent=GUILDS)

    async def _get_message(self, request: web.Request) -> web.Response:
        message = self._channel_message(request)
        return json_response(self._as_seen_by_bot(message, message.raw))

    async def _patch_message(self, request: web.Request) -> web.Response:
        message = self._channel_message(request)
        if message.author_id != BOT_ID:
            raise DiscordError(403, 50005, "Cannot edit a message authored by another user")
        payload, uploads = await read_body(request)
        self._edit(message, payload, uploads)
        await self._updated(message)
        return json_response(message.raw)

    async def _post_message_thread(self, request: web.Request) -> web.Response:
        message = self._channel_message(request)
        parent = self._channels[message.channel_id]
        if parent["type"] != GUILD_TEXT:
            raise DiscordError(400, 50024, "Cannot execute action on this channel type")
        if message.thread_id is not None:
            raise DiscordError(400, 160004, "A thread has already been created for this message")
        payload, _ = await read_body(request)
        # a thread started from a message has the message's id
        self._new_thread(parent, message.id, payload, PUBLIC_THREAD)
        message.thread_id = message.id
        message.flags |= HAS_THREAD
        created = await self._thread_created(message.id)
        await self._updated(message)
        return json_response(created, status=201)

    async def _cdn(self, request: web.Request) -> web.Response:
        attachment = self._files.get(int(request.match_info["attachment_id"]))
        if attachment is None or attachment.name != request.match_info["filename"]:
            return web.Response(status=404, text="This content is no longer available.")
        return web.Response(
            body=attachment.content,
            content_type=(attachment.content_type or "application/octet-stream").split(";")[0],
        )
