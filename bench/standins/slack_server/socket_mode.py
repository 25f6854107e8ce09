"""Socket Mode: the WebSocket the app connects to, envelopes and their acks."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from typing import Any

import aiohttp
from aiohttp import web

from .workspace import Workspace, brief
from .world import ACK_TIMEOUT_S, APP_ID, CONNECT_TIMEOUT_S, Delivery


class SocketMode(Workspace):
    """Socket Mode connections, and delivering envelopes on them."""

    async def wait_connected(self, timeout: float = 30.0) -> None:  # noqa: ASYNC109
        """Wait until a Socket Mode client is connected and has been sent `hello`."""
        if self.mode != "socket":
            raise AssertionError("wait_connected is for Socket Mode")
        await self.wait_for(self._live_sockets, timeout)

    def _live_sockets(self) -> list[web.WebSocketResponse]:
        return [ws for ws in self._sockets if not ws.closed]

    async def drop_socket(self, *, reason: str | None = None) -> None:
        """Close the Socket Mode connection; the client should reconnect.

        With a reason ("refresh_requested", "warning", "link_disabled"), first send the
        `disconnect` message Slack sends before it closes a connection on purpose.
        """
        sockets = self._live_sockets()
        if not sockets:
            raise AssertionError("no Socket Mode connection to drop")
        for ws in sockets:
            if reason is not None:
                await ws.send_json(
                    {"type": "disconnect", "reason": reason, "debug_info": debug_info()}
                )
            await ws.close(code=aiohttp.WSCloseCode.GOING_AWAY)

    async def _deliver_socket(
        self, kind: str, payload: dict[str, Any], retry: tuple[int, str] | None
    ) -> Delivery:
        try:
            sockets = await self.wait_for(self._live_sockets, CONNECT_TIMEOUT_S)
        except AssertionError:
            raise AssertionError(
                f"no Socket Mode connection to deliver {kind} within {CONNECT_TIMEOUT_S:g} s"
            ) from None
        assert isinstance(sockets, list)
        envelope_id = str(uuid.uuid4())
        # Only payloads whose ack can change what the user sees accept a response payload.
        envelope: dict[str, Any] = {
            "envelope_id": envelope_id,
            "payload": payload,
            "type": kind,
            "accepts_response_payload": kind == "slash_commands"
            or payload.get("type") in ("view_submission", "block_suggestion"),
        }
        if kind == "events_api" or retry is not None:
            attempt, reason = retry or (0, "")
            envelope.update(retry_attempt=attempt, retry_reason=reason)
        waiter: asyncio.Future[dict[str, Any] | None] = asyncio.get_running_loop().create_future()
        self._ack_waiters[envelope_id] = waiter
        try:
            target = sockets[-1]
            if self.spread_sockets:
                self._socket_turn += 1
                target = sockets[self._socket_turn % len(sockets)]
            await target.send_str(json.dumps(envelope))
            ack = await asyncio.wait_for(waiter, ACK_TIMEOUT_S)
        except ConnectionError as error:
            raise AssertionError(
                f"the connection closed while delivering {kind}: {error}"
            ) from None
        except TimeoutError:
            raise AssertionError(
                f"the app did not ack {kind} envelope {envelope_id} within {ACK_TIMEOUT_S:g} s "
                f"(Slack shows the user an error and retries events): {brief(payload)}"
            ) from None
        finally:
            self._ack_waiters.pop(envelope_id, None)
        body = json.dumps(ack) if ack is not None else ""
        return Delivery(200, body, ack, payload, kind, envelope_id)

    # ----------------------------------------------------------------- Socket Mode

    async def _socket_mode(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket", "")
        if ticket not in self._tickets:
            return web.Response(status=401, text="invalid ticket")
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        await ws.send_json(
            {
                "type": "hello",
                "num_connections": len(self._live_sockets()) + 1,
                "debug_info": debug_info(),
                "connection_info": {"app_id": APP_ID},
            }
        )
        self.connections += 1
        self._sockets.append(ws)
        self._notify()
        try:
            async for frame in ws:
                if frame.type == aiohttp.WSMsgType.TEXT:
                    self._on_socket_text(frame.data)
        finally:
            self._sockets.remove(ws)
            self._notify()
        return ws

    def _on_socket_text(self, data: str) -> None:
        try:
            message = json.loads(data)
        except json.JSONDecodeError:
            print(f"slack_server: unparsable Socket Mode message {data!r}", file=sys.stderr)
            return
        envelope_id = message.get("envelope_id") if isinstance(message, dict) else None
        if not isinstance(envelope_id, str):
            print(
                f"slack_server: Socket Mode message without envelope_id {data!r}", file=sys.stderr
            )
            return
        payload = message.get("payload")
        self.acks[envelope_id] = payload
        waiter = self._ack_waiters.get(envelope_id)
        if waiter is not None and not waiter.done():
            waiter.set_result(payload)
        self._notify()


def debug_info() -> dict[str, Any]:
    return {"host": "applink-loopback", "build_number": 1, "approximate_connection_time": 18060}
