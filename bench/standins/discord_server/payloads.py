"""Discord's JSON: error bodies, and the user, member, role, channel and app objects."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from .world import (
    ALICE,
    ALL_PERMISSIONS,
    APP_ID,
    BOB,
    BOT_ID,
    CAROL,
    DM,
    EVERYONE_PERMISSIONS,
    FOREIGN_CHANNEL,
    FOREIGN_GUILD,
    GROUP_DM,
    GROUP_DM_TYPE,
    GUILD_ID,
    GUILD_JOINED_AT,
    GUILD_TEXT,
    JSON,
    MEMBER_ROLES,
    OWNER,
    PEOPLE_DM,
    USERS,
)

# ── errors ────────────────────────────────────────────────────────────────────


class DiscordError(Exception):
    """An error answered the way Discord answers it: a status and a JSON error body."""

    def __init__(
        self, status: int, code: int, message: str, errors: dict[str, Any] | None = None
    ) -> None:
        super().__init__(f"{status} {code} {message}")
        self.status = status
        self.code = code
        self.message = message
        self.errors = errors

    def response(self) -> web.Response:
        body: JSON = {"message": self.message, "code": self.code}
        if self.errors is not None:
            body["errors"] = self.errors
        return json_response(body, status=self.status)


def form_error(path: Sequence[str | int], code: str, message: str) -> DiscordError:
    node: dict[str, Any] = {"_errors": [{"code": code, "message": message}]}
    for key in reversed(path):
        node = {str(key): node}
    return DiscordError(400, 50035, "Invalid Form Body", node)


def too_long(path: Sequence[str | int], limit: int) -> DiscordError:
    return form_error(path, "BASE_TYPE_MAX_LENGTH", f"Must be {limit} or fewer in length.")


UNKNOWN_CHANNEL = (404, 10003, "Unknown Channel")
UNKNOWN_MESSAGE = (404, 10008, "Unknown Message")
UNKNOWN_WEBHOOK = (404, 10015, "Unknown Webhook")
UNKNOWN_INTERACTION = (404, 10062, "Unknown interaction")
MISSING_PERMISSIONS = (403, 50013, "Missing Permissions")
MISSING_ACCESS = (403, 50001, "Missing Access")
MAX_FOLLOWUPS = (400, 40094, "This interaction has hit the maximum number of follow up messages")


def known_error(kind: tuple[int, int, str]) -> DiscordError:
    return DiscordError(*kind)


def dumps(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def json_response(
    data: Any, *, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    # exactly "application/json", without a charset: discord.py parses nothing else as JSON
    headers = {**(headers or {}), "Content-Type": "application/json"}
    return web.Response(body=dumps(data).encode(), status=status, headers=headers)


def user_json(user_id: int) -> JSON:
    username, global_name, discriminator, bot = USERS.get(
        user_id, (f"user{user_id % 10000}", None, "0", False)
    )
    data: JSON = {
        "id": str(user_id),
        "username": username,
        "global_name": global_name,
        "discriminator": discriminator,
        "avatar": None,
        "avatar_decoration_data": None,
        "public_flags": 0,
    }
    if bot:
        data["bot"] = True
    return data


def permissions_of(user_id: int) -> int:
    return ALL_PERMISSIONS if user_id == OWNER else EVERYONE_PERMISSIONS


def member_json(
    user_id: int,
    *,
    with_user: bool = True,
    permissions: bool = False,
    roles: tuple[int, ...] | None = None,
) -> JSON:
    """A member of the guild, with their starting roles unless `roles` are given."""
    data: JSON = {
        "roles": [
            str(role) for role in (MEMBER_ROLES.get(user_id, ()) if roles is None else roles)
        ],
        "nick": None,
        "avatar": None,
        "banner": None,
        "joined_at": GUILD_JOINED_AT,
        "premium_since": None,
        "deaf": False,
        "mute": False,
        "flags": 0,
        "pending": False,
        "communication_disabled_until": None,
    }
    if with_user:
        data["user"] = user_json(user_id)
    if permissions:
        data["permissions"] = str(permissions_of(user_id))
    return data


def role_json(role_id: int) -> JSON:
    everyone = role_id == GUILD_ID
    return {
        "id": str(role_id),
        "name": "@everyone" if everyone else "member",
        "color": 0,
        "colors": {"primary_color": 0, "secondary_color": None, "tertiary_color": None},
        "hoist": False,
        "icon": None,
        "unicode_emoji": None,
        "position": 0 if everyone else 1,
        "permissions": str(EVERYONE_PERMISSIONS if everyone else 0),
        "managed": False,
        "mentionable": False,
        "flags": 0,
        "description": None,
    }


def text_channel_json(channel_id: int, name: str, position: int) -> JSON:
    return {
        "id": str(channel_id),
        "type": GUILD_TEXT,
        "guild_id": str(GUILD_ID),
        "name": name,
        "position": position,
        "permission_overwrites": [],
        "parent_id": None,
        "topic": None,
        "nsfw": False,
        "last_message_id": None,
        "rate_limit_per_user": 0,
        "default_thread_rate_limit_per_user": 0,
        "flags": 0,
    }


def places_elsewhere() -> dict[int, JSON]:
    """The channels of places the bot is not in (see `world`)."""
    foreign = {
        **text_channel_json(FOREIGN_CHANNEL, "lounge", 0),
        "guild_id": str(FOREIGN_GUILD),
    }
    group = {
        "id": str(GROUP_DM),
        "type": GROUP_DM_TYPE,
        "name": "study group",
        "icon": None,
        "owner_id": str(ALICE),
        "last_message_id": None,
        "flags": 0,
        "recipients": [user_json(user) for user in (ALICE, BOB, CAROL)],
    }
    people = {
        "id": str(PEOPLE_DM),
        "type": DM,
        "last_message_id": None,
        "flags": 0,
        "recipients": [user_json(user) for user in (ALICE, BOB)],
    }
    return {FOREIGN_CHANNEL: foreign, GROUP_DM: group, PEOPLE_DM: people}


def application_json() -> JSON:
    return {
        "id": str(APP_ID),
        "name": "Cellmate",
        "icon": None,
        "description": "",
        "summary": "",
        "type": None,
        "hook": True,
        "bot_public": True,
        "bot_require_code_grant": False,
        "verify_key": "0" * 64,
        "flags": 0,
        "owner": user_json(OWNER),
        "team": None,
        "bot": user_json(BOT_ID),
        "redirect_uris": [],
        "interactions_endpoint_url": None,
        "approximate_guild_count": 1,
        "tags": [],
        "integration_types_config": {"0": {}, "1": {}},
    }


def me_json() -> JSON:
    return {
        **user_json(BOT_ID),
        "verified": True,
        "mfa_enabled": False,
        "email": None,
        "flags": 0,
        "locale": "en-US",
        "premium_type": 0,
        "banner": None,
        "accent_color": None,
    }


def embed_json(embed: JSON) -> JSON:
    return {"type": "rich", **embed, "content_scan_version": 0}
