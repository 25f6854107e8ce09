"""What people do: post, run commands, click, submit views; and the response_url endpoint."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
import uuid
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from .payloads import action_ids_in, find_element, rich_text, view_state
from .web_api import WebApi
from .world import (
    ALICE,
    APP_ID,
    BOT_USER_ID,
    C_GENERAL,
    RESPONSE_URL_USES,
    TEAM_DOMAIN,
    TEAM_ID,
    VERIFICATION_TOKEN,
    Delivery,
    Message,
    SlackError,
    member_of,
)


class People(WebApi):
    """Actions of the workspace's people, as the payloads Slack sends for them."""

    async def post(
        self,
        channel: str,
        text: str,
        *,
        user: str = ALICE,
        thread_ts: str | None = None,
        mention_bot: bool = False,
        files: Sequence[tuple[str, bytes]] = (),
        team: str = TEAM_ID,
        linked: Sequence[tuple[str, str]] = (),
    ) -> tuple[Message, list[Delivery]]:
        """A user posts a message; the bot gets `message` (and in channels `app_mention`).
        `linked` files are (name, url): file objects whose URLs point at `url`."""
        self._ensure_channel(channel)
        if thread_ts is not None and (channel, thread_ts) not in self.messages:
            raise AssertionError(f"no message {thread_ts} in {channel} to reply to")
        thread_ts = self._thread_root(channel, thread_ts)
        if mention_bot:
            text = f"<@{BOT_USER_ID}> {text}"
        stored_files = [
            self._user_file(name, data, user, channel, thread_ts) for name, data in files
        ]
        for name, url in linked:
            stored_files.append(self._user_file(name, b"", user, channel, thread_ts))
            stored_files[-1].url = url
        extra: dict[str, Any] = {"team": team}
        if member_of(user).bot_id is None:
            extra["client_msg_id"] = str(uuid.uuid4())
        message = self._add_message(
            channel,
            user=user,
            text=text,
            blocks=rich_text(text) if text and member_of(user).bot_id is None else None,
            thread_ts=thread_ts,
            files=stored_files,
            extra=extra,
        )
        events = [self._message_event(message)]
        # Slack sends no app_mention for direct messages: those arrive only as message.im.
        if mention_bot and not channel.startswith("D"):
            events.append(self._app_mention_event(message))
        # Slack sends the two events independently; neither waits for the other's ack.
        deliveries = await asyncio.gather(
            *(self._deliver("events_api", self._event_callback(e, team)) for e in events)
        )
        return message, list(deliveries)

    async def edit(self, message: Message, text: str, *, team: str = TEAM_ID) -> Delivery:
        """The author edits their message; the bot gets the hidden `message_changed` event."""
        previous = dict(message.raw)
        message.edits.append(message.text)
        message.text = text
        message.blocks = rich_text(text)
        message.extra["edited"] = {"user": message.user, "ts": self._next_ts()}
        self._refresh(message)
        event = self._change_event("message_changed", message, previous, message=message.raw)
        return await self._deliver("events_api", self._event_callback(event, team))

    async def slash(
        self,
        command: str,
        text: str = "",
        *,
        channel: str = C_GENERAL,
        user: str = ALICE,
        thread_ts: str | None = None,
    ) -> Delivery:
        """A user runs a slash command.

        Slack's payload does not say which thread a command was typed in, so `thread_ts` only
        documents the test's intent; it is not sent.
        """
        del thread_ts
        self._ensure_channel(channel)
        payload = {
            "token": VERIFICATION_TOKEN,
            "team_id": TEAM_ID,
            "team_domain": TEAM_DOMAIN,
            "channel_id": channel,
            "channel_name": self._channels[channel]["name"],
            "user_id": user,
            "user_name": member_of(user).name,
            "command": command,
            "text": text,
            "api_app_id": APP_ID,
            "is_enterprise_install": "false",
            "response_url": self._new_response_url("commands"),
            "trigger_id": self._new_trigger(),
        }
        return await self._deliver("slash_commands", payload)

    async def click(self, message: Message, action_id: str, *, user: str = ALICE) -> Delivery:
        """A user clicks the button with `action_id` in one of the message's blocks."""
        if message.deleted:
            raise AssertionError(f"message {message.ts} was deleted; nobody can click it")
        found = find_element(message.blocks, action_id)
        if found is None:
            raise AssertionError(
                f"no element with action_id {action_id!r} in message {message.ts}; "
                f"it has {sorted(action_ids_in(message.blocks))}"
            )
        block_id, element = found
        container: dict[str, Any] = {
            "type": "message",
            "message_ts": message.ts,
            "channel_id": message.channel,
            "is_ephemeral": False,
        }
        if message.thread_ts:
            container["thread_ts"] = message.thread_ts
        action = {
            "action_id": action_id,
            "block_id": block_id,
            "type": element.get("type", "button"),
            "action_ts": self._action_ts(),
        }
        for key in ("text", "value", "style"):
            if key in element:
                action[key] = element[key]
        payload = {
            "type": "block_actions",
            **self._interaction_common(user),
            "container": container,
            "trigger_id": self._new_trigger(),
            "channel": self._channel_ref(message.channel),
            "message": message.raw,
            "state": {"values": {}},
            "response_url": self._new_response_url("actions"),
            "actions": [action],
        }
        return await self._deliver("interactive", payload)

    async def submit_view(
        self, opened: dict[str, Any], values: dict[str, str], *, user: str = ALICE
    ) -> Delivery:
        """A user fills in a modal the bot opened (values by action_id) and submits it."""
        view = opened["view"]
        state = view_state(view, values)
        payload = {
            "type": "view_submission",
            **self._interaction_common(user),
            "trigger_id": self._new_trigger(),
            "view": {**view, "state": {"values": state}},
            "response_urls": [],
        }
        delivery = await self._deliver("interactive", payload)
        self._apply_response_action(opened, delivery.ack)
        return delivery

    async def shortcut(
        self, callback_id: str, message: Message, *, user: str = ALICE, channel: str | None = None
    ) -> Delivery:
        """A user runs the app's message shortcut `callback_id` on a message."""
        payload = {
            "type": "message_action",
            **self._interaction_common(user),
            "action_ts": self._action_ts(),
            "callback_id": callback_id,
            "trigger_id": self._new_trigger(),
            "response_url": self._new_response_url("actions"),
            "channel": self._channel_ref(channel or message.channel),
            "message_ts": message.ts,
            "message": message.raw,
        }
        return await self._deliver("interactive", payload)

    def response_url(self) -> str:
        """A fresh response_url, as Slack includes in each command."""
        return self._new_response_url("commands")

    def _interaction_common(self, user: str) -> dict[str, Any]:
        return {
            "user": {
                "id": user,
                "username": member_of(user).name,
                "name": member_of(user).name,
                "team_id": TEAM_ID,
            },
            "api_app_id": APP_ID,
            "token": VERIFICATION_TOKEN,
            "team": {"id": TEAM_ID, "domain": TEAM_DOMAIN},
            "enterprise": None,
            "is_enterprise_install": False,
        }

    def _channel_ref(self, channel: str) -> dict[str, str]:
        self._ensure_channel(channel)
        return {"id": channel, "name": self._channels[channel]["name"]}

    def _action_ts(self) -> str:
        return f"{time.time():.6f}"

    def _new_trigger(self) -> str:
        trigger = f"{next(self._ids)}.{int(time.time())}.{secrets.token_hex(16)}"
        self._triggers[trigger] = time.monotonic()
        return trigger

    def _new_response_url(self, kind: str) -> str:
        key = secrets.token_urlsafe(18)
        self._response_urls[key] = RESPONSE_URL_USES
        return f"{self.base_url}/{kind}/{TEAM_ID}/{next(self._ids)}/{key}"

    def _apply_response_action(self, opened: dict[str, Any], ack: dict[str, Any] | None) -> None:
        # An ack may replace the submitted modal or push a new one onto its stack.
        action = (ack or {}).get("response_action")
        if ack is None or action not in ("update", "push"):
            return
        try:
            view = self._make_view(ack.get("view") or {}, previous=opened["view"])
        except SlackError as error:
            raise AssertionError(f"Slack rejects the {action} view: {error.extra}") from None
        if action == "update":
            opened["view"] = view
        else:
            self.views.append({"trigger_id": None, "view": {**view, "id": self._new_id("V")}})
        self._notify()

    async def _response_url(self, request: web.Request) -> web.StreamResponse:
        key = request.match_info["key"]
        uses_left = self._response_urls.get(key)
        if uses_left is None:
            return web.Response(status=404, text="invalid_url")
        if uses_left <= 0:
            return web.Response(status=404, text="used_url")
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return web.Response(status=400, text="invalid_payload")
        self._response_urls[key] = uses_left - 1
        self.responses.append(body)
        self._notify()
        return web.json_response({"ok": True})
