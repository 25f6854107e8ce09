"""Messages: their JSON, the content intent, mentions, attachments, create and edit."""

from __future__ import annotations

import hashlib
import time

from .checks import check_message_fields, with_ids
from .gateway import Gateway
from .payloads import DiscordError, embed_json, form_error, member_json, user_json
from .world import (
    APP_ID,
    BOT_ID,
    DIRECT_MESSAGES,
    DM,
    EPHEMERAL,
    GUILD_ID,
    GUILD_MESSAGES,
    IS_COMPONENTS_V2,
    JSON,
    LOADING,
    MEMBER_ROLES,
    MESSAGE_CONTENT,
    OTHER_GUILD,
    ROLE_MEMBER,
    ROLE_MENTION,
    SENDABLE_FLAGS,
    SUPPRESS_EMBEDS,
    THREAD_TYPES,
    USER_MENTION,
    USERS,
    Attachment,
    Message,
    Upload,
    iso,
    snowflake_time,
)


class Messages(Gateway):
    """Messages as the REST API and the gateway show them, and their changes."""

    def _attachment_json(self, attachment: Attachment, channel_id: int, *, ephemeral: bool) -> JSON:
        now = int(time.time())
        # Discord signs CDN links and lets them expire; the server serves them regardless.
        signature = hashlib.sha256(f"{attachment.id}".encode()).hexdigest()
        url = attachment.url or (
            f"{self.base_url}/attachments/{channel_id}/{attachment.id}/{attachment.name}"
            f"?ex={now + 86400:x}&is={now:x}&hm={signature}&"
        )
        data: JSON = {
            "id": str(attachment.id),
            "filename": attachment.name,
            "size": len(attachment.content),
            "url": url,
            "proxy_url": url,
        }
        if attachment.content_type is not None:
            data["content_type"] = attachment.content_type
        if attachment.description is not None:
            data["description"] = attachment.description
        if ephemeral:
            data["ephemeral"] = True
        return data

    def _message_json(self, message: Message, *, nested: bool = False) -> JSON:
        """The message object as the REST API returns it."""
        meta = message._meta
        channel = self._channels.get(message.channel_id, {})
        ephemeral = bool(message.flags & EPHEMERAL)
        data: JSON = {
            "type": message.type,
            "content": message.content,
            "mentions": [user_json(user_id) for user_id in message.mentions],
            "mention_roles": [str(role) for role in meta.get("mention_roles", [])],
            "attachments": [
                self._attachment_json(a, message.channel_id, ephemeral=ephemeral)
                for a in message.attachments
            ],
            "embeds": [embed_json(embed) for embed in message.embeds],
            "timestamp": snowflake_time(message.id),
            "edited_timestamp": meta.get("edited"),
            "flags": message.flags,
            "components": meta.get("components", []),
            "id": str(message.id),
            "channel_id": str(message.channel_id),
            "author": user_json(message.author_id),
            "pinned": False,
            "mention_everyone": meta.get("mention_everyone", False),
            "tts": meta.get("tts", False),
        }
        if "guild_id" in channel:
            data["guild_id"] = channel["guild_id"]
        if meta.get("nonce") is not None:
            data["nonce"] = meta["nonce"]
        if message.interaction_id is not None:
            data["webhook_id"] = str(APP_ID)
            data["application_id"] = str(APP_ID)
            data.update(meta.get("interaction", {}))
        if message.thread_id is not None and message.thread_id in self.threads:
            data["thread"] = self.threads[message.thread_id]
        if message.reference_id is not None:
            data["message_reference"] = self._reference_json(message.reference_id)
            if not nested:
                referenced = self.messages.get(message.reference_id)
                data["referenced_message"] = (
                    None
                    if referenced is None or referenced.deleted
                    else self._message_json(referenced, nested=True)
                )
        return data

    def _reference_json(self, message_id: int) -> JSON:
        referenced = self.messages[message_id]
        data: JSON = {
            "type": 0,
            "message_id": str(message_id),
            "channel_id": str(referenced.channel_id),
        }
        guild_id = self._channels.get(referenced.channel_id, {}).get("guild_id")
        if guild_id is not None:
            data["guild_id"] = guild_id
        return data

    def _bot_can_read(self, message: Message) -> bool:
        """Discord's message content rule: without the intent, only the bot's own messages,
        DMs and messages that mention the bot carry their content."""
        if self.intents is not None and self.intents & MESSAGE_CONTENT:
            return True
        channel = self._channels.get(message.channel_id, {})
        return (
            message.author_id == BOT_ID or channel.get("type") == DM or BOT_ID in message.mentions
        )

    def _as_seen_by_bot(self, message: Message, data: JSON) -> JSON:
        if not self._bot_can_read(message):
            data = {**data, "content": "", "embeds": [], "attachments": [], "components": []}
            data.pop("poll", None)
        referenced = data.get("referenced_message")
        if referenced is not None and message.reference_id in self.messages:
            data["referenced_message"] = self._as_seen_by_bot(
                self.messages[message.reference_id], referenced
            )
        return data

    def _gateway_message(self, message: Message) -> JSON:
        """The message as MESSAGE_CREATE / MESSAGE_UPDATE carry it: content rules applied,
        and members alongside users in guilds."""
        data = self._as_seen_by_bot(message, self._message_json(message))
        if "guild_id" in data:
            if message.interaction_id is None and message.author_id in MEMBER_ROLES:
                data["member"] = member_json(message.author_id, with_user=False)
            data["mentions"] = [
                {**user_json(user_id), "member": member_json(user_id, with_user=False)}
                if user_id in MEMBER_ROLES
                else user_json(user_id)
                for user_id in message.mentions
            ]
        return data

    @staticmethod
    def _bot_is_in(channel: JSON) -> bool:
        """Whether the bot is in a channel: one of its servers' (threads included), or its
        own DM; not a server it is not in, nor a DM or group DM between people."""
        if "guild_id" in channel:
            return channel["guild_id"] in (str(GUILD_ID), str(OTHER_GUILD))
        return channel.get("type") == DM and len(channel.get("recipients") or ()) == 1

    @staticmethod
    def _message_intent(channel: JSON) -> int:
        return DIRECT_MESSAGES if channel.get("type") == DM else GUILD_MESSAGES

    async def _publish(self, message: Message) -> None:
        """Store a new message and tell the bot, as Discord does for every visible message."""
        self.messages[message.id] = message
        channel = self._channels[message.channel_id]
        channel["last_message_id"] = str(message.id)
        if channel["type"] in THREAD_TYPES:
            channel["message_count"] += 1
            channel["total_message_sent"] += 1
        message.raw = self._message_json(message)
        for hook in self.message_hooks:
            hook(message)
        if message.flags & EPHEMERAL or not self._bot_is_in(channel):
            # only the user sees ephemeral messages, and the bot nothing where it is not
            self._touch()
            return
        await self._dispatch(
            "MESSAGE_CREATE",
            self._gateway_message(message),
            intent=self._message_intent(channel),
        )

    async def _updated(self, message: Message) -> None:
        message.raw = self._message_json(message)
        for hook in self.message_hooks:
            hook(message)
        channel = self._channels[message.channel_id]
        if message.flags & EPHEMERAL or not self._bot_is_in(channel):
            self._touch()
            return
        await self._dispatch(
            "MESSAGE_UPDATE",
            self._gateway_message(message),
            intent=self._message_intent(channel),
        )

    def _parse_mentions(
        self,
        content: str,
        allowed: JSON | None,
        author: int,
        reference: Message | None,
    ) -> tuple[list[int], list[int], bool]:
        """Users and roles a message pings, after `allowed_mentions`."""
        users = list(dict.fromkeys(int(m) for m in USER_MENTION.findall(content)))
        users = [user for user in users if user in USERS]
        roles = list(dict.fromkeys(int(m) for m in ROLE_MENTION.findall(content)))
        roles = [role for role in roles if role == ROLE_MEMBER]
        everyone = "@everyone" in content or "@here" in content
        replied_user = True
        if allowed is not None:
            parse = allowed.get("parse") or []
            listed_users = {str(user) for user in allowed.get("users") or []}
            listed_roles = {str(role) for role in allowed.get("roles") or []}
            users = [u for u in users if "users" in parse or str(u) in listed_users]
            roles = [r for r in roles if "roles" in parse or str(r) in listed_roles]
            everyone = everyone and "everyone" in parse
            replied_user = bool(allowed.get("replied_user", False))
        if (
            reference is not None
            and replied_user
            and reference.author_id != author
            and reference.author_id not in users
        ):
            users.append(reference.author_id)
        return users, roles, everyone

    def _resolve_attachments(
        self, payload: JSON, uploads: list[Upload], existing: list[Attachment]
    ) -> list[Attachment] | None:
        """The attachments after a create or edit; None when an edit leaves them alone.
        In v10 `attachments` lists every attachment to keep: existing ones by their id and
        new uploads by their `files[n]` index."""
        listed = payload.get("attachments")
        if listed is None:
            if not uploads:
                return None
            return existing + [self._store_file(u.filename, u.content) for u in uploads]
        by_index = {upload.index: upload for upload in uploads}
        kept = {attachment.id: attachment for attachment in existing}
        result = []
        for position, entry in enumerate(listed):
            try:
                ident = int(entry["id"])
            except (KeyError, TypeError, ValueError):
                raise form_error(
                    ["attachments", position, "id"], "BASE_TYPE_REQUIRED", "This field is required"
                ) from None
            if ident in kept:
                result.append(kept[ident])
            elif ident in by_index:
                upload = by_index[ident]
                name = entry.get("filename") or upload.filename
                result.append(self._store_file(name, upload.content, entry.get("description")))
            else:
                raise form_error(
                    ["attachments", position],
                    "ATTACHMENT_NOT_FOUND",
                    f"Attachment data not found for id {ident}",
                )
        return result

    def _compose(
        self,
        channel_id: int,
        payload: JSON,
        uploads: list[Upload],
        *,
        allowed_flags: int = SENDABLE_FLAGS,
    ) -> Message:
        """A new bot message from a create payload (channel message, interaction response or
        follow-up), checked like Discord checks it."""
        flags = int(payload.get("flags") or 0) & allowed_flags
        check_message_fields(payload, flags)
        attachments = self._resolve_attachments(payload, uploads, []) or []
        content = payload.get("content") or ""
        embeds = payload.get("embeds") or []
        components = payload.get("components") or []
        if not (
            content.strip()
            or embeds
            or attachments
            or components
            or payload.get("sticker_ids")
            or payload.get("poll")
        ):
            raise DiscordError(400, 50006, "Cannot send an empty message")
        reference = self._reference(payload.get("message_reference"))
        allowed = payload.get("allowed_mentions")
        users, roles, everyone = self._parse_mentions(content, allowed, BOT_ID, reference)
        message = Message(
            id=self._ids.next(),
            channel_id=channel_id,
            author_id=BOT_ID,
            content=content,
            attachments=attachments,
            embeds=embeds,
            components=components,
            flags=flags,
            allowed_mentions=allowed,
            reference_id=reference.id if reference else None,
            type=19 if reference else 0,
            mentions=users,
        )
        message._meta.update(
            mention_roles=roles,
            mention_everyone=everyone,
            tts=bool(payload.get("tts")),
            nonce=payload.get("nonce"),
            components=with_ids(components),
        )
        return message

    def _reference(self, reference: JSON | None) -> Message | None:
        if not reference or reference.get("type", 0) != 0:
            return None
        found = self.messages.get(int(reference.get("message_id") or 0))
        if found is not None and not found.deleted:
            return found
        if reference.get("fail_if_not_exists", True):
            raise form_error(
                ["message_reference"], "MESSAGE_REFERENCE_UNKNOWN_MESSAGE", "Unknown message"
            )
        return None

    def _edit(self, message: Message, payload: JSON, uploads: list[Upload]) -> None:
        """Apply an edit payload (REST edit, webhook edit, UPDATE_MESSAGE callback)."""
        flags = message.flags
        if "flags" in payload:
            # only SUPPRESS_EMBEDS can be changed by an edit, and components v2 turned on
            requested = int(payload["flags"] or 0)
            flags = (flags & ~SUPPRESS_EMBEDS) | (requested & (SUPPRESS_EMBEDS | IS_COMPONENTS_V2))
        check_message_fields(payload, flags)
        content = message.content
        if "content" in payload:
            content = payload["content"] or ""
        embeds = message.embeds if "embeds" not in payload else payload["embeds"] or []
        components = (
            message.components if "components" not in payload else payload["components"] or []
        )
        attachments = self._resolve_attachments(payload, uploads, message.attachments)
        if attachments is None:
            attachments = message.attachments
        if not (content.strip() or embeds or attachments or components):
            raise DiscordError(400, 50006, "Cannot send an empty message")
        was_loading = bool(message.flags & LOADING)
        if content != message.content:
            message.edits.append(message.content)
            message.content = content
        message.embeds = embeds
        if components is not message.components:
            message.components = components
            message._meta["components"] = with_ids(components)
        message.attachments = attachments
        message.flags = flags & ~LOADING
        if "allowed_mentions" in payload:
            message.allowed_mentions = payload["allowed_mentions"]
        reference = self.messages.get(message.reference_id or 0)
        users, roles, everyone = self._parse_mentions(
            content, message.allowed_mentions, BOT_ID, reference
        )
        message.mentions = users
        message._meta.update(mention_roles=roles, mention_everyone=everyone)
        if not was_loading:  # the deferred response's first edit is its first version
            message._meta["edited"] = iso()
