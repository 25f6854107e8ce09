"""A Slack workspace on loopback that speaks Slack's wire protocols to a real Bolt app.

`SlackServer` plays Slack for protocol-level tests of the Slack bot:

* the Web API under `api_url` (the bot passes it as `AsyncWebClient(base_url=...)`), keeping
  the workspace's messages, files, reactions, views and ephemeral messages in memory;
* Socket Mode: `apps.connections.open` hands out a WebSocket URL on this server, which greets
  with `hello` and then sends envelopes the app must acknowledge within three seconds;
* HTTP mode: the same payloads POSTed to the bot's own request URL, signed with
  `SIGNING_SECRET` the way Slack signs them (`v0=` HMAC-SHA256 of `v0:{timestamp}:{body}`);
* the edges around both: the upload URLs of `files.getUploadURLExternal`, `url_private`
  downloads (which need the bot token, as on Slack) and `response_url` endpoints.

Tests act as people: `post`, `slash`, `click`, `submit_view` and `shortcut` build the payload
Slack documents for that action, deliver it in the server's mode and return what the bot
answered. The bot's own messages come back to it as `message` events, as they do on Slack, so
a bot that does not ignore itself shows it. Slack's limits that real bots trip over (block
text lengths, trigger_id lifetime, response_url uses) are enforced with Slack's error codes.

The modules: `world` (ids, people, tokens, limits, records), `payloads` (Web API arguments
and Block Kit), `workspace` (what the server holds), `socket_mode`, `http_events` and
`events` (deliveries to the app), `web_api` and `files` (what the app calls), `people`
(what users do), `ai` (assistant threads and streamed messages, and their rate tiers), put
together by `server`.
"""

from .ai import MARKDOWN_LIMIT
from .server import SlackServer
from .world import (
    ACK_TIMEOUT_S,
    ADMIN,
    ALICE,
    APP_ID,
    APP_TOKEN,
    BOB,
    BOT_ID,
    BOT_TOKEN,
    BOT_USER_ID,
    C_GENERAL,
    C_OTHER,
    CONNECT_TIMEOUT_S,
    MAX_MESSAGE_BLOCKS,
    MAX_MESSAGE_TEXT,
    MAX_VIEW_BLOCKS,
    OTHER_APP_ID,
    OTHER_BOT_ID,
    OTHER_BOT_USER,
    OTHER_TEAM,
    RESPONSE_URL_USES,
    SIGNING_SECRET,
    TEAM_DOMAIN,
    TEAM_ID,
    TRIGGER_TTL_S,
    VERIFICATION_TOKEN,
    Delivery,
    File,
    Message,
    SlackError,
)

__all__ = [
    "ACK_TIMEOUT_S",
    "ADMIN",
    "ALICE",
    "APP_ID",
    "APP_TOKEN",
    "BOB",
    "BOT_ID",
    "BOT_TOKEN",
    "BOT_USER_ID",
    "CONNECT_TIMEOUT_S",
    "C_GENERAL",
    "C_OTHER",
    "MARKDOWN_LIMIT",
    "MAX_MESSAGE_BLOCKS",
    "MAX_MESSAGE_TEXT",
    "MAX_VIEW_BLOCKS",
    "OTHER_APP_ID",
    "OTHER_BOT_ID",
    "OTHER_BOT_USER",
    "OTHER_TEAM",
    "RESPONSE_URL_USES",
    "SIGNING_SECRET",
    "TEAM_DOMAIN",
    "TEAM_ID",
    "TRIGGER_TTL_S",
    "VERIFICATION_TOKEN",
    "Delivery",
    "File",
    "Message",
    "SlackError",
    "SlackServer",
]
