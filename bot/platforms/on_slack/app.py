"""The Slack front end (slack_bolt, async): mentions and DMs answered in threads, /run,
the "Run code" message shortcut, /reset, /export, and Stop / Re-run buttons.

Bolt acknowledges each request within Slack's 3 seconds and the turn runs afterwards.
Slack redelivers events it thinks were missed; a message is handled once, by its channel
and timestamp, however often (and by however many event types) it arrives.
"""

from __future__ import annotations

import json
import logging
import secrets
from typing import Any

import yarl
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent import UserMessage
from bot.platforms.access import NOT_HERE, NOT_YOURS, AccessRules, Gate, Place, Refused, Seen
from bot.platforms.hub import Hub
from bot.platforms.markup import code_blocks
from bot.platforms.on_slack.mrkdwn import unescape
from bot.platforms.on_slack.reply import SlackReply, SlackThread
from bot.platforms.turns import SHUTDOWN_NOTICE, RerunSpec, Running
from bot.settings import SlackSettings
from storage.intake import SLACK_FILE_HOSTS, IncomingFile, http_fetcher

log = logging.getLogger(__name__)

HELP = (
    "Ask me anything Python can answer (share CSV or Excel files with the message to "
    "analyse them), or send code in a ``` block. I answer in a thread; keep talking there. "
    "`/run` runs code directly, `/reset` starts over, `/export` gives the notebook."
)
RUN_MODAL = "cm_run_modal"
NO_CONVERSATION = "You have no conversation with me in this channel yet: mention me to start one."


class CellmateSlack:
    def __init__(self, hub: Hub, settings: SlackSettings) -> None:
        self.hub = hub
        self.agent = hub.agent
        self.settings = settings
        self.client = AsyncWebClient(
            token=settings.bot_token, base_url=settings.api_url or AsyncWebClient.BASE_URL
        )
        self.client.retry_handlers.append(AsyncRateLimitErrorRetryHandler(max_retry_count=3))
        http_mode = settings.connection == "http"
        self.app = AsyncApp(
            client=self.client,
            signing_secret=settings.signing_secret if http_mode else None,
            request_verification_enabled=http_mode,
        )
        self.gate = Gate(
            AccessRules(
                servers=frozenset(settings.teams),
                channels=frozenset(settings.channels),
                users=frozenset(settings.users),
                dms=settings.dms,
                cooldown_s=settings.cooldown_s,
            )
        )
        self.seen = Seen()
        self.threads: dict[tuple[str, str], bool] = {}
        """(channel, thread ts) -> whether the bot takes part in that thread."""
        self.latest: dict[tuple[str, str, str], str] = {}
        """(team, channel, user) -> the user's latest conversation there, for /reset, /export."""
        self.bot_user = ""
        self.team = ""
        self.fetch = http_fetcher(
            file_hosts(settings),
            {"Authorization": f"Bearer {settings.bot_token}"},
            where="Slack's file servers",
        )
        self._register()

    async def connect(self) -> None:
        """Who the bot is (auth.test); fails early on a bad token."""
        identity = await self.client.auth_test()
        self.bot_user = str(identity["user_id"])
        self.team = str(identity.get("team_id") or "")
        self.hub.connected["slack"] = True

    def _register(self) -> None:
        app = self.app
        app.event("app_mention")(self._on_mention)
        app.event("message")(self._on_message)
        app.command("/run")(self._on_run)
        app.command("/reset")(self._on_reset)
        app.command("/export")(self._on_export)
        app.command("/usage")(self._on_usage)
        app.shortcut("cm_run_code")(self._on_run_code)
        app.view(RUN_MODAL)(self._on_modal)
        app.action("cm_stop")(self._on_stop)
        app.action("cm_rerun")(self._on_rerun)

    # ── messages ──────────────────────────────────────────────────────────

    async def _on_mention(self, event: dict[str, Any], body: dict[str, Any]) -> None:
        await self._message(event, body, mention=True)

    async def _on_message(self, event: dict[str, Any], body: dict[str, Any]) -> None:
        await self._message(event, body, mention=False)

    async def _message(self, event: dict[str, Any], body: dict[str, Any], mention: bool) -> None:
        if event.get("bot_id") or event.get("subtype") not in (None, "file_share"):
            return
        user = str(event.get("user") or "")
        if not user or user == self.bot_user:
            return
        channel, ts = str(event["channel"]), str(event["ts"])
        thread_ts = event.get("thread_ts")
        dm = event.get("channel_type") == "im" or channel.startswith("D")
        text = unescape(str(event.get("text") or ""))
        tag = f"<@{self.bot_user}>"
        if not mention and tag in text and not dm:
            return  # its app_mention event handles it
        if not (mention or dm or await self._in_thread(channel, thread_ts)):
            return
        team = str(body.get("team_id") or event.get("team") or self.team)
        if not self.gate.allows(Place(user, team, channel, dm=dm)):
            return
        if not self.seen.first_time(f"{channel}:{ts}"):
            return
        root = str(thread_ts or ts)
        self.threads[(channel, root)] = True
        thread = SlackThread(self.client, channel, root)
        text = text.replace(tag, "").strip()
        files = [
            IncomingFile(
                str(f.get("name") or "file"),
                f.get("size"),
                url=f.get("url_private_download") or f.get("url_private"),
            )
            for f in event.get("files") or []
        ]
        if not text and not files:
            await thread.post(HELP)
            return
        conversation = f"slack:{team}:{channel}:{root}"
        self.latest[(team, channel, user)] = conversation
        message = UserMessage(text, files, user=user, server=team, fetch=self.fetch)
        await self._react(channel, ts, "eyes", add=True)
        try:
            await self.run_turn(thread, conversation, message, user)
        finally:
            await self._react(channel, ts, "eyes", add=False)

    async def _in_thread(self, channel: str, thread_ts: str | None) -> bool:
        """Whether a reply in this thread continues a conversation without a mention."""
        if thread_ts is None or not self.settings.thread_replies:
            return False
        key = (channel, str(thread_ts))
        if key not in self.threads:
            # After a restart: the bot takes part if it has posted in the thread.
            try:
                replies = await self.client.conversations_replies(
                    channel=channel, ts=str(thread_ts), limit=100
                )
                messages = replies.get("messages") or []
                self.threads[key] = any(m.get("user") == self.bot_user for m in messages)
            except SlackApiError:
                self.threads[key] = False
        return self.threads[key]

    async def _react(self, channel: str, ts: str, name: str, add: bool) -> None:
        try:
            if add:
                await self.client.reactions_add(channel=channel, timestamp=ts, name=name)
            else:
                await self.client.reactions_remove(channel=channel, timestamp=ts, name=name)
        except SlackApiError as exc:  # a missing reaction scope must not cost the answer
            log.info("reaction %s failed: %s", name, exc.response.get("error"))

    # ── turns ─────────────────────────────────────────────────────────────

    async def run_turn(
        self,
        thread: SlackThread,
        conversation: str,
        message: UserMessage,
        owner: str,
        rerun: RerunSpec | None = None,
        one_off: bool = False,
    ) -> None:
        """One turn with its reply, or one message saying why it cannot start."""
        try:
            with self.hub.starting(self.gate, owner, message.server, conversation) as entry:
                await self._turn(thread, message, entry, rerun)
        except Refused as exc:
            await thread.tell(owner, str(exc))
        finally:
            if one_off:  # after the user's turn is released: cleaning up takes a moment
                await self.agent.reset(conversation)

    async def _turn(
        self, thread: SlackThread, message: UserMessage, entry: Running, rerun: RerunSpec | None
    ) -> None:
        done = None
        if rerun is not None:
            self.hub.turns.remember(entry.key, rerun)
            done = ("cm_rerun", "Re-run", entry.key)
        reply = SlackReply(
            thread,
            ("cm_stop", "Stop", entry.key),
            done,
            max_files=self.settings.files_per_answer,
        )
        conversation = entry.turn.conversation
        try:
            progress = await reply.start()
            if thread.thread_ts is None:
                # A /run result starts its own thread: the answer and files go under it.
                thread.thread_ts = progress
            await self.agent.turn(conversation, message, reply, entry.turn)
            if entry.shutdown:
                reply.view.notices.append(SHUTDOWN_NOTICE)
            await reply.finish()
        except Exception as exc:
            log.exception("turn failed in %s", conversation)
            try:
                await thread.post(f":x: Something went wrong while answering: {exc}")
            except SlackApiError:
                log.exception("could not tell the user about the failure")

    async def start_run(
        self, code: str, channel: str, user: str, team: str, thread_ts: str | None = None
    ) -> None:
        """/run, the modal, the shortcut and Re-run: code run directly in a one-off session."""
        if not await self._admitted(user, team, channel, thread_ts):
            return
        await self.run_turn(
            SlackThread(self.client, channel, thread_ts),
            f"slack:run:{secrets.token_hex(8)}",
            UserMessage(f"/run\n{code}", user=user, server=team),
            user,
            rerun=RerunSpec(code, None, team, user),
            one_off=True,
        )

    async def _admitted(
        self, user: str, team: str, channel: str, thread_ts: str | None = None, respond: Any = None
    ) -> bool:
        """The admission check of every command, shortcut and button; a refused user is told
        so (by `respond`, or in an ephemeral message)."""
        if self.gate.allows(Place(user, team, channel, dm=channel.startswith("D"))):
            return True
        if respond is not None:
            await respond(NOT_HERE, response_type="ephemeral", replace_original=False)
        else:
            await SlackThread(self.client, channel, thread_ts).tell(user, NOT_HERE)
        return False

    async def moderator(self, user: str) -> bool:
        """Configured admins, and the workspace's admins and owners."""
        if user in self.hub.admins:
            return True
        try:
            found = await self.client.users_info(user=user)
        except SlackApiError:
            return False
        profile = found.get("user") or {}
        return bool(profile.get("is_admin") or profile.get("is_owner"))

    async def _may_act(self, user: str, conversation: str | None, owner: str = "") -> bool:
        """Whether `user` may act on a conversation (None: a one-off run of `owner`)."""
        if user == owner or self.gate.may_act(conversation or "", user):
            return True
        return await self.moderator(user)

    # ── commands, shortcuts, buttons ──────────────────────────────────────

    async def _on_run(self, ack: Any, command: dict[str, Any], client: AsyncWebClient) -> None:
        await ack()
        code = unescape(str(command.get("text") or ""))
        channel, user = str(command["channel_id"]), str(command["user_id"])
        team = str(command.get("team_id") or self.team)
        if code.strip():
            await self.start_run(code_blocks(code) or code, channel, user, team)
            return
        if not await self._admitted(user, team, channel):
            return
        await client.views_open(trigger_id=command["trigger_id"], view=_run_modal(channel, team))

    async def _on_modal(self, ack: Any, body: dict[str, Any], view: dict[str, Any]) -> None:
        await ack()
        where = json.loads(view.get("private_metadata") or "{}")
        code = view["state"]["values"]["code"]["code"]["value"] or ""
        user = str(body["user"]["id"])
        await self.start_run(code, where["channel"], user, where.get("team", self.team))

    async def _on_run_code(self, ack: Any, shortcut: dict[str, Any]) -> None:
        await ack()
        message = shortcut.get("message") or {}
        channel = str((shortcut.get("channel") or {}).get("id") or "")
        user = str(shortcut["user"]["id"])
        team = str((shortcut.get("team") or {}).get("id") or self.team)
        root = str(message.get("thread_ts") or message.get("ts") or "") or None
        code = code_blocks(unescape(str(message.get("text") or "")))
        if not await self._admitted(user, team, channel, root):
            return
        if code is None:
            await SlackThread(self.client, channel, root).tell(user, "That message has no code.")
            return
        await self.start_run(code, channel, user, team, thread_ts=root)

    async def _on_reset(self, ack: Any, command: dict[str, Any], respond: Any) -> None:
        await ack()
        conversation = await self._own_conversation(command, respond)
        if conversation is None:
            return
        await self.agent.reset(conversation)
        await respond(
            "Forgot our latest conversation here and restarted its Python session.",
            response_type="ephemeral",
        )

    async def _on_export(self, ack: Any, command: dict[str, Any], respond: Any) -> None:
        await ack()
        conversation = await self._own_conversation(command, respond)
        if conversation is None:
            return
        notebook = await self.agent.executor.session(conversation).export_notebook()
        if notebook is None:
            await respond(
                "Nothing to export yet: no code has run there.", response_type="ephemeral"
            )
            return
        _, channel, root = conversation.rsplit(":", 2)
        data = json.dumps(notebook, indent=1).encode()
        await SlackThread(self.client, channel, root).upload([("session.ipynb", data)])
        await respond("The notebook is in the conversation's thread.", response_type="ephemeral")

    async def _on_usage(self, ack: Any, command: dict[str, Any], respond: Any) -> None:
        await ack()
        user = str(command["user_id"])
        team = str(command.get("team_id") or self.team)
        if not await self._admitted(user, team, str(command["channel_id"]), respond=respond):
            return
        if not await self.moderator(user):
            await respond("Only admins can see usage.", response_type="ephemeral")
            return
        await respond(self.hub.usage(team), response_type="ephemeral")

    async def _own_conversation(self, command: dict[str, Any], respond: Any) -> str | None:
        """The conversation /reset and /export act on: the user's latest one in the channel,
        which they took part in; None, with the user told why, where there is none."""
        team = str(command.get("team_id") or self.team)
        channel, user = str(command["channel_id"]), str(command["user_id"])
        if not await self._admitted(user, team, channel, respond=respond):
            return None
        conversation = self.latest.get((team, channel, user))
        if conversation is None or not await self._may_act(user, conversation):
            await respond(NO_CONVERSATION, response_type="ephemeral")
            return None
        return conversation

    async def _on_stop(self, ack: Any, body: dict[str, Any], respond: Any) -> None:
        await ack()
        key = str(body["actions"][0].get("value") or "")
        running = self.hub.turns.get(key)
        user = str(body["user"]["id"])
        if not await self._admitted(user, _team(body, self.team), _channel(body), respond=respond):
            return
        if running is None:
            await respond(
                "That has already finished.", response_type="ephemeral", replace_original=False
            )
            return
        if not await self._may_act(user, running.turn.conversation, running.owner):
            await respond(NOT_YOURS, response_type="ephemeral", replace_original=False)
            return
        running.turn.stop(self.agent)

    async def _on_rerun(self, ack: Any, body: dict[str, Any], respond: Any) -> None:
        await ack()
        spec = self.hub.turns.rerun(str(body["actions"][0].get("value") or ""))
        user, channel = str(body["user"]["id"]), _channel(body)
        if not await self._admitted(user, _team(body, self.team), channel, respond=respond):
            return
        if spec is None:
            await respond(
                "I no longer have that code (the bot restarted since); use /run again.",
                response_type="ephemeral",
                replace_original=False,
            )
            return
        if not await self._may_act(user, spec.conversation, spec.owner):
            await respond(NOT_YOURS, response_type="ephemeral", replace_original=False)
            return
        message = body.get("message") or {}
        root = str(message.get("thread_ts") or message.get("ts") or "") or None
        await self.start_run(spec.code, channel, user, spec.server, root)


def file_hosts(settings: SlackSettings) -> tuple[str, ...]:
    """Where the bot token may go for shared files: the setting, else Slack's file hosts
    (and a custom API's own server, which serves the files it describes)."""
    if settings.file_hosts:
        return settings.file_hosts
    extra = (str(yarl.URL(settings.api_url).origin()),) if settings.api_url else ()
    return (*SLACK_FILE_HOSTS, *extra)


def _channel(body: dict[str, Any]) -> str:
    return str((body.get("channel") or {}).get("id") or "")


def _team(body: dict[str, Any], default: str) -> str:
    return str((body.get("team") or {}).get("id") or body.get("team_id") or default)


def _run_modal(channel: str, team: str) -> dict[str, Any]:
    return {
        "type": "modal",
        "callback_id": RUN_MODAL,
        "title": {"type": "plain_text", "text": "Run Python"},
        "submit": {"type": "plain_text", "text": "Run"},
        "close": {"type": "plain_text", "text": "Cancel"},
        "private_metadata": json.dumps({"channel": channel, "team": team}),
        "blocks": [
            {
                "type": "input",
                "block_id": "code",
                "label": {"type": "plain_text", "text": "Code"},
                "element": {
                    "type": "plain_text_input",
                    "action_id": "code",
                    "multiline": True,
                    "placeholder": {"type": "plain_text", "text": "import pandas as pd"},
                },
            }
        ],
    }
