"""The network on Slack: `/network`, and the card posted in a conversation's thread when its
code hits a closed door, with Allow once, Allow in this channel and Deny; each translated
into a call on the conversation service, which decides."""

from __future__ import annotations

from typing import Any

from slack_bolt.async_app import AsyncApp

from bot.conversations import ConversationKey, Refused
from bot.conversations.doors import DoorCard, DoorChoice
from bot.conversations.network import parse_network
from bot.platforms.on_slack.buttons import presser
from bot.platforms.on_slack.front import SlackFront
from bot.platforms.on_slack.mrkdwn import unescape
from bot.platforms.on_slack.render import blocks, plain

ACTIONS = {
    DoorChoice.ONCE: ("cm_door_once", "Allow once"),
    DoorChoice.CHANNEL: ("cm_door_channel", "Allow in this channel"),
    DoorChoice.DENY: ("cm_door_deny", "Deny"),
}
NETWORK_USAGE = (
    "Use `/network` to see what code here may reach, `/network allow HOST[:PORT] [once|channel]` "
    "or `/network deny HOST`."
)


def card_message(card: DoorCard) -> tuple[str, list[dict[str, Any]]]:
    text = f":door: {plain(card.text)}"
    buttons = [(action, label, card.key) for action, label in ACTIONS.values()]
    return text, blocks(text, buttons)


def register_doors(app: AsyncApp, front: SlackFront) -> None:
    async def ring(card: DoorCard) -> None:
        key = card.conversation
        text, shown = card_message(card)
        # A one-off run has no thread of its own: its card goes to the channel.
        thread = None if key.is_one_off else key.thread or None
        await front.client.chat_postMessage(
            channel=key.channel, thread_ts=thread, text=text, blocks=shown
        )

    front.conversations.doorbells["slack"] = ring

    @app.command("/network")
    async def network(ack: Any, command: dict[str, Any], respond: Any) -> None:
        """/network [list], /network allow HOST[:PORT] [once|channel], /network deny HOST."""
        await ack()
        team = str(command.get("team_id") or front.team)
        channel, user = str(command["channel_id"]), str(command["user_id"])
        person = await front.person(user, team, channel)
        if not await front.admitted(person, channel, respond=respond):
            return
        asked = parse_network(unescape(str(command.get("text") or "")))
        if asked is None:
            await respond(NETWORK_USAGE, response_type="ephemeral")
            return
        # Slack's commands do not say which thread they were typed in: a one-run grant is
        # for the person's latest conversation in the channel.
        key = front.latest.get((team, channel, user)) or ConversationKey("slack", team, channel)
        answer = await front.conversations.network_command(front.door, person, key, asked)
        await respond(plain(answer), response_type="ephemeral")

    for choice, (action, _) in ACTIONS.items():
        app.action(action)(_pressed(front, choice))


def _pressed(front: SlackFront, choice: DoorChoice) -> Any:
    async def press(ack: Any, body: dict[str, Any], respond: Any) -> None:
        """A press on a card: the card then says who decided what; an Allow runs the code
        again in the conversation's thread."""
        await ack()
        person = await presser(front, body)
        try:
            answer = await front.conversations.answer_door(
                front.door, person, str(body["actions"][0].get("value") or ""), choice
            )
        except Refused as exc:
            await respond(str(exc), response_type="ephemeral", replace_original=False)
            return
        card = answer.card
        text = "\n".join([f":door: {plain(card.text)}", answer.outcome(f"<@{person.user}>")])
        message = body.get("message") or {}
        await front.client.chat_update(
            channel=card.conversation.channel,
            ts=str(message.get("ts") or ""),
            text=text,
            blocks=blocks(text),
        )
        if answer.rerun is not None:
            key = card.conversation
            await front.start_run(answer.rerun, person, key, None if key.is_one_off else key.thread)

    return press
