"""HTTP mode: payloads POSTed to the app's request URL, signed like Slack signs them."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any
from urllib.parse import urlencode

import aiohttp

from .workspace import Workspace, brief
from .world import (
    ACK_TIMEOUT_S,
    ALICE,
    APP_ID,
    C_GENERAL,
    SIGNING_SECRET,
    TEAM_ID,
    VERIFICATION_TOKEN,
    Delivery,
    member_of,
)


class HttpEvents(Workspace):
    """Deliveries to the app's request URL, and raw signed requests."""

    async def send_signed(
        self,
        body: bytes,
        content_type: str,
        *,
        timestamp: int | None = None,
        bad_signature: bool = False,
    ) -> Delivery:
        """POST raw bytes to the bot's request URL, signed (or mis-signed) like Slack."""
        secret = "not-" + SIGNING_SECRET if bad_signature else SIGNING_SECRET
        headers = slack_signed_headers(body, content_type, timestamp or int(time.time()), secret)
        return await self._post_to_bot(body, headers, {}, "raw")

    async def send_raw(self, body: bytes, headers: dict[str, str]) -> Delivery:
        """POST bytes with exactly these headers to the bot's request URL (a replay, or a
        request with a malformed signature header)."""
        return await self._post_to_bot(body, headers, {}, "raw")

    @staticmethod
    def signed_headers(body: bytes, content_type: str, timestamp: int) -> dict[str, str]:
        """The headers Slack sends with `body`, signed with the app's signing secret."""
        return slack_signed_headers(body, content_type, timestamp, SIGNING_SECRET)

    @staticmethod
    def slash_body(command: str, text: str, response_url: str, user: str = ALICE) -> bytes:
        """A slash command's form body as Slack posts it in HTTP mode."""
        payload = {
            "token": VERIFICATION_TOKEN,
            "team_id": TEAM_ID,
            "channel_id": C_GENERAL,
            "channel_name": "general",
            "user_id": user,
            "user_name": member_of(user).name,
            "command": command,
            "text": text,
            "api_app_id": APP_ID,
            "response_url": response_url,
            "trigger_id": f"1.{int(time.time())}.replayed",
        }
        return urlencode(payload).encode()

    async def _deliver_http(
        self, kind: str, payload: dict[str, Any], retry: tuple[int, str] | None
    ) -> Delivery:
        if kind == "events_api":
            body, content_type = json.dumps(payload).encode(), "application/json"
        elif kind == "slash_commands":
            body, content_type = urlencode(payload).encode(), "application/x-www-form-urlencoded"
        else:
            body = urlencode({"payload": json.dumps(payload)}).encode()
            content_type = "application/x-www-form-urlencoded"
        headers = slack_signed_headers(body, content_type, int(time.time()), SIGNING_SECRET)
        if retry is not None:
            headers["X-Slack-Retry-Num"] = str(retry[0])
            headers["X-Slack-Retry-Reason"] = retry[1]
        return await self._post_to_bot(body, headers, payload, kind)

    async def _post_to_bot(
        self, body: bytes, headers: dict[str, str], payload: dict[str, Any], kind: str
    ) -> Delivery:
        if not self.bot_url:
            raise AssertionError("HTTP mode needs bot_url: the app's request URL")
        assert self._session is not None, "start() the server first"
        timeout = aiohttp.ClientTimeout(total=ACK_TIMEOUT_S)
        try:
            async with self._session.post(
                self.bot_url, data=body, headers=headers, timeout=timeout
            ) as response:
                text = await response.text()
                status, content_type = response.status, response.content_type
        except TimeoutError:
            raise AssertionError(
                f"the app did not answer {kind} within {ACK_TIMEOUT_S:g} s: {brief(payload)}"
            ) from None
        except aiohttp.ClientConnectionError as error:
            raise AssertionError(f"could not reach the app at {self.bot_url}: {error}") from None
        ack: dict[str, Any] | None = None
        if status == 200 and text:
            ack = json.loads(text) if content_type == "application/json" else {"text": text}
        return Delivery(status, text, ack, payload, kind)


def slack_signed_headers(
    body: bytes, content_type: str, timestamp: int, secret: str
) -> dict[str, str]:
    basestring = f"v0:{timestamp}:".encode() + body
    digest = hmac.new(secret.encode(), basestring, hashlib.sha256).hexdigest()
    return {
        "Content-Type": content_type,
        "X-Slack-Request-Timestamp": str(timestamp),
        "X-Slack-Signature": f"v0={digest}",
        "User-Agent": "Slackbot 1.0 (+https://api.slack.com/robots)",
    }
