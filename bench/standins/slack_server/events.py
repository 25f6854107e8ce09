"""Events API payloads and delivering them in the server's mode."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp

from .http_events import HttpEvents
from .socket_mode import SocketMode
from .world import (
    APP_ID,
    BOT_USER_ID,
    TEAM_ID,
    THREAD_SUMMARY,
    VERIFICATION_TOKEN,
    Delivery,
    Message,
)


class Events(SocketMode, HttpEvents):
    """The events Slack sends the app, delivered over Socket Mode or HTTP."""

    async def redeliver(
        self, delivery: Delivery, attempt: int = 1, reason: str = "http_timeout"
    ) -> Delivery:
        """Slack's retry of a delivery: the same payload (and event_id), marked as a retry."""
        return await self._deliver(delivery.kind, delivery.payload, retry=(attempt, reason))

    # ----------------------------------------------------------------- events

    def _message_event(self, message: Message) -> dict[str, Any]:
        event = {k: v for k, v in message.raw.items() if k not in THREAD_SUMMARY}
        if not message.thread_ts:
            event.pop("thread_ts", None)
        event.update(
            channel=message.channel,
            event_ts=message.ts,
            channel_type=self._channel_type(message.channel),
        )
        return event

    def _app_mention_event(self, message: Message) -> dict[str, Any]:
        event = self._message_event(message)
        del event["channel_type"]
        event.pop("subtype", None)
        return {**event, "type": "app_mention"}

    def _event_callback(self, event: dict[str, Any], team: str = TEAM_ID) -> dict[str, Any]:
        return {
            "token": VERIFICATION_TOKEN,
            "team_id": team,
            "context_team_id": team,
            "context_enterprise_id": None,
            "api_app_id": APP_ID,
            "event": event,
            "type": "event_callback",
            "event_id": self._new_id("Ev"),
            "event_time": int(time.time()),
            "authorizations": [
                {
                    "enterprise_id": None,
                    "team_id": team,
                    "user_id": BOT_USER_ID,
                    "is_bot": True,
                    "is_enterprise_install": False,
                }
            ],
            "is_ext_shared_channel": False,
            "event_context": f"4-{event['type']}-{team}-{event.get('channel', '')}",
        }

    def _echo(self, event: dict[str, Any]) -> None:
        """Deliver an event caused by the bot's own API call, without blocking that call."""
        task = asyncio.get_running_loop().create_task(self._deliver_quietly(event))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _deliver_quietly(self, event: dict[str, Any]) -> None:
        payload = self._event_callback(event)
        try:
            await self._deliver("events_api", payload)
        except (AssertionError, ConnectionError, aiohttp.ClientError) as failure:
            # Unacknowledged echoes are the bot's business; record them like any delivery.
            self.deliveries.append(Delivery(0, str(failure), None, payload))
            self._notify()

    # ----------------------------------------------------------------- delivery

    async def _deliver(
        self, kind: str, payload: dict[str, Any], *, retry: tuple[int, str] | None = None
    ) -> Delivery:
        if self.mode == "socket":
            delivery = await self._deliver_socket(kind, payload, retry)
        else:
            delivery = await self._deliver_http(kind, payload, retry)
        self.deliveries.append(delivery)
        self._notify()
        return delivery

    def _change_event(
        self, subtype: str, changed: Message, previous: dict[str, Any], **fields: Any
    ) -> dict[str, Any]:
        """The hidden `message` event Slack sends when a message is edited or deleted."""
        ts = self._next_ts()
        return {
            "type": "message",
            "subtype": subtype,
            "hidden": True,
            "channel": changed.channel,
            "ts": ts,
            "event_ts": ts,
            "previous_message": previous,
            "channel_type": self._channel_type(changed.channel),
            **fields,
        }
