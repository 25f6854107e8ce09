"""REST plumbing (auth, 429s, bodies) and the gateway URL, bot user and application routes."""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from .interactions import Interactions
from .payloads import (
    MISSING_ACCESS,
    UNKNOWN_CHANNEL,
    UNKNOWN_MESSAGE,
    DiscordError,
    application_json,
    json_response,
    known_error,
    me_json,
    member_json,
)
from .world import (
    API_PREFIX,
    EPHEMERAL,
    GUILD_ID,
    JSON,
    MAX_UPLOAD,
    OTHER_GUILD,
    TOKEN,
    Message,
    RateLimitRule,
    Upload,
)


def truthy_query(value: str | None) -> bool:
    return value is not None and value.lower() in ("1", "true")


async def read_body(request: web.Request) -> tuple[JSON, list[Upload]]:
    """The JSON payload and uploaded files of a request (JSON or multipart)."""
    if request.content_type == "multipart/form-data":
        form = await request.post()
        payload = json.loads(str(form.get("payload_json") or "{}"))
        uploads: list[Upload] = []
        for key, value in form.items():
            if not isinstance(value, web.FileField):
                continue
            match = re.fullmatch(r"files\[(\d+)\]", key)
            index = int(match.group(1)) if match else len(uploads)
            content = value.file.read()
            if len(content) > MAX_UPLOAD:
                raise DiscordError(413, 40005, "Request entity too large")
            uploads.append(Upload(index, value.filename, content))
        return payload, uploads
    raw = await request.read()
    if not raw:
        return {}, []
    try:
        return json.loads(raw), []
    except ValueError:
        raise DiscordError(400, 50109, "The request body contains invalid JSON.") from None


class Rest(Interactions):
    """REST requests: what every route shares, and the routes about the bot and guild."""

    def rate_limit_next(self, method: str, path_contains: str, retry_after: float = 0.3) -> None:
        """The next REST request with this method whose path contains the text gets a 429."""
        self._rate_limits.append(RateLimitRule(method.upper(), path_contains, retry_after))

    # ── REST plumbing ─────────────────────────────────────────────────────

    @web.middleware
    async def _middleware(
        self, request: web.Request, handler: Callable[[web.Request], Any]
    ) -> web.StreamResponse:
        if not request.path.startswith(API_PREFIX + "/"):
            return await self._plain(request, handler)
        route = request.path[len(API_PREFIX) :]
        self.requests.append((request.method, route))
        for hook in self.request_hooks:
            hook(request.method, route)
        try:
            limited = self._take_rate_limit(request.method, request.path)
            if limited is not None:
                return limited
            token_in_url = route.startswith(("/interactions/", "/webhooks/"))
            if not token_in_url and request.headers.get("Authorization") != f"Bot {TOKEN}":
                raise DiscordError(401, 0, "401: Unauthorized")
            response: web.StreamResponse = await handler(request)
        except DiscordError as exc:
            response = exc.response()
        except ValueError:  # an id in the path or body that is not a snowflake
            response = DiscordError(400, 50035, "Invalid Form Body").response()
        except web.HTTPNotFound:
            print(f"discord_server: no route for {request.method} {route}", file=sys.stderr)
            response = DiscordError(404, 0, "404: Not Found").response()
        except web.HTTPMethodNotAllowed:
            print(f"discord_server: no route for {request.method} {route}", file=sys.stderr)
            response = DiscordError(405, 0, "405: Method Not Allowed").response()
        finally:
            self._touch()
        response.headers["Via"] = "1.1 google"
        return response

    @staticmethod
    async def _plain(
        request: web.Request, handler: Callable[[web.Request], Any]
    ) -> web.StreamResponse:
        try:
            result: web.StreamResponse = await handler(request)
        except web.HTTPNotFound:
            print(f"discord_server: no route for {request.method} {request.path}", file=sys.stderr)
            raise
        return result

    def _take_rate_limit(self, method: str, path: str) -> web.Response | None:
        rule = next(
            (r for r in self._rate_limits if r.method == method and r.path_contains in path),
            None,
        )
        if rule is None:
            return None
        self._rate_limits.remove(rule)
        self.rate_limited += 1
        reset = time.time() + rule.retry_after
        bucket = hashlib.sha256(f"{method} {path}".encode()).hexdigest()[:32]
        headers = {
            # discord.py only trusts a 429 that came through Discord's proxy (Via)
            "Via": "1.1 google",
            "Retry-After": str(max(1, math.ceil(rule.retry_after))),
            "X-RateLimit-Limit": "5",
            "X-RateLimit-Remaining": "0",
            "X-RateLimit-Reset": f"{reset:.3f}",
            "X-RateLimit-Reset-After": f"{rule.retry_after:.3f}",
            "X-RateLimit-Bucket": bucket,
            "X-RateLimit-Scope": "user",
        }
        body = {
            "message": "You are being rate limited.",
            "retry_after": rule.retry_after,
            "global": False,
        }
        return json_response(body, status=429, headers=headers)

    def _channel(self, request: web.Request) -> JSON:
        channel = self._channels.get(int(request.match_info["channel_id"]))
        if channel is None:
            raise known_error(UNKNOWN_CHANNEL)
        if not self._bot_is_in(channel):
            raise known_error(MISSING_ACCESS)
        return channel

    def _channel_message(self, request: web.Request) -> Message:
        channel = self._channel(request)
        message = self.messages.get(int(request.match_info["message_id"]))
        if (
            message is None
            or message.deleted
            or message.flags & EPHEMERAL  # only reachable through the interaction webhook
            or str(message.channel_id) != channel["id"]
        ):
            raise known_error(UNKNOWN_MESSAGE)
        return message

    # ── REST: the gateway URL, the bot user and its application ───────────

    async def _get_gateway_bot(self, request: web.Request) -> web.Response:
        limit = {"total": 1000, "remaining": 999, "reset_after": 14_400_000, "max_concurrency": 1}
        return json_response({"url": self.gateway_url, "shards": 1, "session_start_limit": limit})

    async def _get_me(self, request: web.Request) -> web.Response:
        return json_response(me_json())

    async def _get_application(self, request: web.Request) -> web.Response:
        return json_response(application_json())

    async def _get_member(self, request: web.Request) -> web.Response:
        guild = int(request.match_info["guild_id"])
        if guild != GUILD_ID and not (guild == OTHER_GUILD and self.other_guild):
            raise DiscordError(404, 10004, "Unknown Guild")
        user = int(request.match_info["user_id"])
        roles = self.guild_members[guild].get(user)
        if roles is None:
            raise DiscordError(404, 10007, "Unknown Member")
        return json_response(member_json(user, roles=roles))
