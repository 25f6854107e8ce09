"""Slack's buttons (Stop, Keep running, Run beside, Re-run; Run, Edit and Cancel on code
waiting for approval) and the approval editor's submission: each press translated into a
call on the conversation service."""

from __future__ import annotations

from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from bot.conversations import Person, Refused
from bot.conversations.approval import Verdict
from bot.platforms.on_slack import approval
from bot.platforms.on_slack.front import SlackFront
from bot.platforms.on_slack.modals import EDIT_MODAL, edit_modal, submitted
from bot.platforms.turn_reply import ran_beside


def register_buttons(app: AsyncApp, front: SlackFront) -> None:
    @app.action(approval.RUN)
    @app.action(approval.CANCEL)
    async def run_or_cancel(ack: Any, body: dict[str, Any], respond: Any) -> None:
        """Run or Cancel on code waiting for approval; the approval message then says who."""
        await ack()
        action = body["actions"][0]
        verdict = Verdict.RUN if action.get("action_id") == approval.RUN else Verdict.CANCELLED
        person = await presser(front, body)
        try:
            await front.conversations.decide(
                front.door, person, str(action.get("value") or ""), verdict
            )
        except Refused as exc:
            await respond(str(exc), response_type="ephemeral", replace_original=False)

    @app.action(approval.EDIT)
    async def edit(ack: Any, body: dict[str, Any], respond: Any, client: AsyncWebClient) -> None:
        """Edit opens the waiting code in a modal, for a person who may decide on it."""
        await ack()
        key = str(body["actions"][0].get("value") or "")
        team, channel = _team(body, front.team), _channel(body)
        person = await front.person(str(body["user"]["id"]), team, channel)
        try:
            waiting = await front.conversations.approvable(front.door, person, key)
            if len(waiting.code) > approval.EDIT_LIMIT:
                raise Refused(approval.TOO_LONG_TO_EDIT)
        except Refused as exc:
            await respond(str(exc), response_type="ephemeral", replace_original=False)
            return
        await client.views_open(
            trigger_id=body["trigger_id"],
            view=edit_modal(key, waiting.code, channel, team),
        )

    @app.view(EDIT_MODAL)
    async def edited(ack: Any, body: dict[str, Any], view: dict[str, Any]) -> None:
        """The edited code runs instead of the model's."""
        code, where = submitted(view)
        person = await front.person(
            str(body["user"]["id"]), where.get("team", front.team), where["channel"]
        )
        try:
            await front.conversations.decide(
                front.door, person, str(where.get("key") or ""), Verdict.EDITED, code
            )
        except Refused as exc:
            # Shown in the modal, which stays open: the edit is not lost.
            await ack(response_action="errors", errors={"code": str(exc)})
            return
        await ack()

    @app.action("cm_stop")
    @app.action("cm_keep")
    @app.action("cm_beside")
    async def on_turn(ack: Any, body: dict[str, Any], respond: Any) -> None:
        """Stop, Keep running or Run beside on a running turn (Stop also on a run in the
        background); who may not act on it is told why, alone."""
        await ack()
        action = body["actions"][0]
        key = str(action.get("value") or "")
        person = await presser(front, body)
        conversations = front.conversations
        pressed = str(action.get("action_id") or "")
        acts = {
            "cm_stop": conversations.stop,
            "cm_keep": conversations.keep_running,
            "cm_beside": conversations.run_beside,
        }
        try:
            why_not = await acts[pressed](front.door, person, key)
        except Refused as exc:
            why_not = str(exc)
        if why_not is not None:
            await respond(why_not, response_type="ephemeral", replace_original=False)
        elif pressed == "cm_beside":
            ran_beside(key)

    @app.action("cm_rerun")
    async def rerun(ack: Any, body: dict[str, Any], respond: Any) -> None:
        await ack()
        person = await presser(front, body)
        try:
            code, key = await front.conversations.rerun(
                front.door, person, str(body["actions"][0].get("value") or "")
            )
        except Refused as exc:
            await respond(str(exc), response_type="ephemeral", replace_original=False)
            return
        message = body.get("message") or {}
        root = str(message.get("thread_ts") or message.get("ts") or "") or None
        await front.start_run(code, person, key, root)


async def presser(front: SlackFront, body: dict[str, Any]) -> Person:
    return await front.person(str(body["user"]["id"]), _team(body, front.team), _channel(body))


def _channel(body: dict[str, Any]) -> str:
    return str((body.get("channel") or {}).get("id") or "")


def _team(body: dict[str, Any], default: str) -> str:
    return str((body.get("team") or {}).get("id") or body.get("team_id") or default)
