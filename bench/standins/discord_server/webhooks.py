"""Interaction callbacks and the interaction webhook: follow-ups and response edits."""

from __future__ import annotations

from aiohttp import web

from .payloads import (
    MAX_FOLLOWUPS,
    UNKNOWN_INTERACTION,
    UNKNOWN_MESSAGE,
    UNKNOWN_WEBHOOK,
    DiscordError,
    form_error,
    json_response,
    known_error,
)
from .rest import Rest, read_body, truthy_query
from .world import (
    APP_ID,
    CALLBACKS_ALLOWED,
    GUILD_INSTALL,
    INTERACTION_FLAGS,
    MAX_USER_INSTALL_FOLLOWUPS,
    InteractionState,
    Message,
)


class Webhooks(Rest):
    """How the bot answers interactions: callbacks, then the interaction webhook."""

    async def _callback(self, request: web.Request) -> web.Response:
        interaction_id = int(request.match_info["interaction_id"])
        payload, uploads = await read_body(request)
        kind = payload.get("type")
        data = payload.get("data") or {}
        self.callbacks.append({"interaction_id": interaction_id, "type": kind, "data": data})
        state = self._states.get(interaction_id)
        if state is None or state.expired or state.interaction.token != request.match_info["token"]:
            raise known_error(UNKNOWN_INTERACTION)
        if state.acked is not None:
            raise DiscordError(400, 40060, "Interaction has already been acknowledged.")
        allowed = CALLBACKS_ALLOWED[state.kind]
        if kind not in allowed:
            raise form_error(
                ["type"], "BASE_TYPE_CHOICES", f"Value must be one of {sorted(allowed)}."
            )
        message = await self._respond(state, kind, data, uploads)
        state.acked = kind
        if not truthy_query(request.query.get("with_response")):
            return web.Response(status=204)
        return json_response(self._callback_json(state, kind, message))

    def _webhook_state(self, request: web.Request) -> InteractionState:
        state = self._by_token.get(request.match_info["token"])
        if request.match_info["application_id"] != str(APP_ID) or state is None:
            raise known_error(UNKNOWN_WEBHOOK)
        if state.expired:
            raise DiscordError(401, 50027, "Invalid Webhook Token")
        if state.acked is None:
            raise known_error(
                UNKNOWN_WEBHOOK
            )  # the webhook exists once the interaction is answered
        return state

    def _webhook_message(self, request: web.Request, state: InteractionState) -> Message:
        wanted = request.match_info["message_id"]
        if wanted == "@original":
            message_id = state.original_id
        else:
            message_id = int(wanted)
            if message_id not in state.created and message_id != state.original_id:
                message_id = None
        message = self.messages.get(message_id or 0)
        if message is None or message.deleted:
            raise known_error(UNKNOWN_MESSAGE)
        return message

    async def _post_followup(self, request: web.Request) -> web.Response:
        state = self._webhook_state(request)
        payload, uploads = await read_body(request)
        if state.loading and state.original_id is not None:
            # the first follow-up after a deferred response replaces the "thinking" message
            message = self.messages[state.original_id]
            self._edit(message, {k: v for k, v in payload.items() if k != "flags"}, uploads)
            state.loading = False
            await self._updated(message)
        else:
            if (
                str(GUILD_INSTALL) not in state.owners
                and state.followups >= MAX_USER_INSTALL_FOLLOWUPS
            ):
                raise known_error(MAX_FOLLOWUPS)
            state.followups += 1
            message = self._compose(
                state.interaction.channel_id, payload, uploads, allowed_flags=INTERACTION_FLAGS
            )
            self._stamp(message, state, followup=True)
            state.created.append(message.id)
            await self._publish(message)
        if not truthy_query(request.query.get("wait")):
            return web.Response(status=204)
        return json_response(message.raw)

    async def _patch_webhook_message(self, request: web.Request) -> web.Response:
        state = self._webhook_state(request)
        message = self._webhook_message(request, state)
        payload, uploads = await read_body(request)
        self._edit(message, payload, uploads)
        if message.id == state.original_id:
            state.loading = False
        await self._updated(message)
        return json_response(message.raw)
