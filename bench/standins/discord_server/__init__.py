"""A Discord API server on loopback that the real `discord.py` client can connect to.

One aiohttp server plays Discord for one guild, a handful of users and one bot (and, for
the app installed to people's accounts, a server, a group DM and a DM the bot is not in;
see `places`):

* the REST API (v10) under `/api/v10`: messages (JSON and multipart uploads), threads,
  DMs, application commands, interaction callbacks and interaction webhooks;
* the gateway WebSocket at `/gateway`: HELLO, IDENTIFY → READY + GUILD_CREATE,
  heartbeats, RESUME with replay of missed dispatches, `zlib-stream` compression;
* a CDN route that serves uploaded attachments.

Payloads follow Discord's documented shapes (snowflakes as strings, full message objects,
interaction callback responses, `Invalid Form Body` errors, 429s with rate-limit headers).
Discord's rules that bots trip over in production are kept: without the message content
intent, users' messages arrive without content unless they mention the bot or are DMs;
ephemeral messages never reach the gateway; the first follow-up after a deferred response
replaces the "thinking" message; interaction tokens can expire.

Tests act as the users (`post_message`, `slash`, `click`, ...) and inspect what the bot did
through `messages`, `threads`, `callbacks` and `requests`; `wait_for` waits for a condition.

The modules: `world` (ids, users, flags, records), `payloads` (Discord's JSON objects and
errors), `checks` (the limits on what the bot sends), `state` (what the server holds),
`gateway`, `messages`, `places`, `interactions`, and the REST routes in `rest`, `commands`,
`channels` and `webhooks`, put together by `server`.
"""

from .payloads import (
    MISSING_PERMISSIONS,
    UNKNOWN_CHANNEL,
    UNKNOWN_INTERACTION,
    UNKNOWN_MESSAGE,
    UNKNOWN_WEBHOOK,
    DiscordError,
)
from .server import DiscordServer
from .world import (
    ALICE,
    ALL_PERMISSIONS,
    API_PREFIX,
    APP_ID,
    APP_PERMISSIONS_ELSEWHERE,
    APPLICATION_COMMAND,
    AUTOCOMPLETE,
    BOB,
    BOT_ID,
    CAROL,
    CHANNEL_GENERAL,
    CHANNEL_OTHER,
    DAVE,
    DIRECT_MESSAGE_REACTIONS,
    DIRECT_MESSAGES,
    DISCORD_EPOCH_MS,
    DM,
    EPHEMERAL,
    EVERYONE_PERMISSIONS,
    FOREIGN_CHANNEL,
    FOREIGN_GUILD,
    GROUP_DM,
    GUILD_ID,
    GUILD_JOINED_AT,
    GUILD_MESSAGE_REACTIONS,
    GUILD_MESSAGES,
    GUILD_TEXT,
    GUILDS,
    HAS_THREAD,
    IS_COMPONENTS_V2,
    JSON,
    LOADING,
    MAX_UPLOAD,
    MAX_USER_INSTALL_FOLLOWUPS,
    MESSAGE_COMPONENT,
    MESSAGE_CONTENT,
    MODAL_SUBMIT,
    OTHER_BOT,
    OTHER_GUILD,
    OTHER_ROLE,
    OWNER,
    PEOPLE_DM,
    PRIVATE_THREAD,
    PUBLIC_THREAD,
    ROLE_MEMBER,
    SUPPRESS_EMBEDS,
    SUPPRESS_NOTIFICATIONS,
    TOKEN,
    Attachment,
    Interaction,
    Message,
)

__all__ = [
    "ALICE",
    "ALL_PERMISSIONS",
    "API_PREFIX",
    "APPLICATION_COMMAND",
    "APP_ID",
    "APP_PERMISSIONS_ELSEWHERE",
    "AUTOCOMPLETE",
    "BOB",
    "BOT_ID",
    "CAROL",
    "CHANNEL_GENERAL",
    "CHANNEL_OTHER",
    "DAVE",
    "DIRECT_MESSAGES",
    "DIRECT_MESSAGE_REACTIONS",
    "DISCORD_EPOCH_MS",
    "DM",
    "EPHEMERAL",
    "EVERYONE_PERMISSIONS",
    "FOREIGN_CHANNEL",
    "FOREIGN_GUILD",
    "GROUP_DM",
    "GUILDS",
    "GUILD_ID",
    "GUILD_JOINED_AT",
    "GUILD_MESSAGES",
    "GUILD_MESSAGE_REACTIONS",
    "GUILD_TEXT",
    "HAS_THREAD",
    "IS_COMPONENTS_V2",
    "JSON",
    "LOADING",
    "MAX_UPLOAD",
    "MAX_USER_INSTALL_FOLLOWUPS",
    "MESSAGE_COMPONENT",
    "MESSAGE_CONTENT",
    "MISSING_PERMISSIONS",
    "MODAL_SUBMIT",
    "OTHER_BOT",
    "OTHER_GUILD",
    "OTHER_ROLE",
    "OWNER",
    "PEOPLE_DM",
    "PRIVATE_THREAD",
    "PUBLIC_THREAD",
    "ROLE_MEMBER",
    "SUPPRESS_EMBEDS",
    "SUPPRESS_NOTIFICATIONS",
    "TOKEN",
    "UNKNOWN_CHANNEL",
    "UNKNOWN_INTERACTION",
    "UNKNOWN_MESSAGE",
    "UNKNOWN_WEBHOOK",
    "Attachment",
    "DiscordError",
    "DiscordServer",
    "Interaction",
    "Message",
]
