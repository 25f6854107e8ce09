"""The Slack front end (slack_bolt, async): mentions, DMs and thread replies answered in
threads, /run and its editor, the "Run code" message shortcut, and edits of code messages;
each translated into a call on the conversation service. The app's state and lookups
(threads, each person's latest conversation, the members of allowed channels) are here; the
other commands are in `commands`, the buttons in `buttons`, both through `SlackFront`.

Bolt acknowledges each request within Slack's 3 seconds and the turn runs afterwards.
Slack redelivers events it thinks were missed; a message is handled once, by its channel
and timestamp, however often (and by however many event types) it arrives.

A DM, and a command, shortcut or button used in one, is admitted by the conversation
layer's rules from where its sender is: with a channel allowlist, the allowed channels
they are a member of (`members`, kept for `membership_ttl_s`).
"""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent import UserMessage
from bot.conversations import Admission, ConversationKey, Conversations, Person
from bot.conversations.access import AccessRules, Place
from bot.conversations.presence import Expiring, Presence
from bot.errors import NOT_HERE
from bot.fences import (
    BACKGROUND_FLAG,
    BESIDE_FLAG,
    BOTH_FLAGS,
    direct_code,
    direct_rerun,
    known_tag,
    run_parts,
    runnable_again,
    with_language,
)
from bot.logs import payload_logger
from bot.platforms.file_hosts import file_hosts as shared_hosts
from bot.platforms.markup import code_blocks
from bot.platforms.on_slack.assistant import AssistantThreads, register_assistant
from bot.platforms.on_slack.buttons import register_buttons
from bot.platforms.on_slack.commands import register_commands
from bot.platforms.on_slack.doors import register_doors
from bot.platforms.on_slack.mcp import register_mcp
from bot.platforms.on_slack.modals import RUN_MODAL, run_modal, submitted
from bot.platforms.on_slack.mrkdwn import unescape
from bot.platforms.on_slack.prompts import register_prompts
from bot.platforms.on_slack.reply import SlackReply, SlackThread
from bot.platforms.on_slack.schedules import register_schedules
from bot.platforms.on_slack.streaming import StreamingSlackReply, Streams
from bot.settings import SlackSettings
from storage.intake import SLACK_FILE_HOSTS, IncomingFile, http_fetcher

log = logging.getLogger(__name__)

HELP = (
    "Ask me anything Python can answer (share CSV or Excel files with the message to "
    "analyse them), or send code in a ``` block. I answer in a thread; keep talking there. "
    "`/run` runs code directly, `/files` lists your files, `/reset` starts over, "
    "`/restore` brings back a saved workspace, `/export` gives the notebook, "
    "`/policy` shows whether code needs approval here."
)
MEMBER_PAGES = 50
"""At most this many pages of 1,000 members are read of one allowed channel."""


class CellmateSlack:
    def __init__(
        self,
        conversations: Conversations,
        settings: SlackSettings,
        connected: dict[str, bool] | None = None,
    ) -> None:
        self.conversations = conversations
        self.settings = settings
        self.connected = connected if connected is not None else {}
        """Platform name -> whether its connection is up, for /healthz."""
        self.client = AsyncWebClient(
            token=settings.bot_token, base_url=settings.api_url or AsyncWebClient.BASE_URL
        )
        self.client.retry_handlers.append(AsyncRateLimitErrorRetryHandler(max_retry_count=3))
        self.streams = Streams(self.client, settings.stream)
        self.assistant = AssistantThreads(self.client, settings)
        http_mode = settings.connection == "http"
        self.app = AsyncApp(
            client=self.client,
            signing_secret=settings.signing_secret if http_mode else None,
            request_verification_enabled=http_mode,
            logger=payload_logger("slack_bolt.app"),
        )
        self.door = Admission(
            AccessRules(
                servers=frozenset(settings.teams),
                channels=frozenset(settings.channels),
                users=frozenset(settings.users),
                dms=settings.dms,
                dm_users=frozenset(settings.dm_users),
                cooldown_s=settings.cooldown_s,
            ),
            shared=conversations.shared_events,
        )
        self.presence = Presence(self.door.rules, self.whereabouts)
        self.members: Expiring[str, frozenset[str]] = Expiring(
            settings.membership_ttl_s, size=max(16, len(settings.channels))
        )
        """Allowed channel -> its members, for DMs."""
        self.threads: dict[tuple[str, str], bool] = {}
        """(channel, thread ts) -> whether the bot takes part in that thread."""
        self.latest: dict[tuple[str, str, str], ConversationKey] = {}
        """(team, channel, user) -> the user's latest conversation there, for commands."""
        self.code_messages: dict[tuple[str, str], ConversationKey] = {}
        """(channel, ts) of messages that were code run directly, for a re-run on edit."""
        self.one_offs: dict[str, SlackThread] = {}
        """A one-off run's conversation id -> the thread its answer is in (a /run in a
        channel starts one with its first message), while its turn, or its run in the
        background, lasts."""
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
        self.connected["slack"] = True

    def _register(self) -> None:
        app = self.app
        app.event("app_mention")(self._on_mention)
        app.event("message")(self._on_message)
        app.command("/run")(self._on_run)
        app.shortcut("cm_run_code")(self._on_run_code)
        app.view(RUN_MODAL)(self._on_modal)
        register_commands(app, self)
        register_buttons(app, self)
        register_doors(app, self)
        register_prompts(app, self)
        register_schedules(app, self)
        register_mcp(app, self)
        register_assistant(app, self, self.assistant)

    # ── messages ──────────────────────────────────────────────────────────

    async def _on_mention(self, event: dict[str, Any], body: dict[str, Any]) -> None:
        await self._message(event, body, mention=True)

    async def _on_message(self, event: dict[str, Any], body: dict[str, Any]) -> None:
        if event.get("subtype") == "message_changed":
            await self._edited(event, body)
            return
        await self._message(event, body, mention=False)

    async def _message(
        self, event: dict[str, Any], body: dict[str, Any], mention: bool, edit: str = ""
    ) -> None:
        with self.conversations.turns.arriving():
            await self._arriving_message(event, body, mention, edit)

    async def _arriving_message(
        self, event: dict[str, Any], body: dict[str, Any], mention: bool, edit: str
    ) -> None:
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
        if not mention and tag in text and not dm and not edit:
            return  # its app_mention event handles it
        if not (mention or dm or edit or await self._in_thread(channel, thread_ts)):
            return
        team = str(body.get("team_id") or event.get("team") or self.team)
        person = await self.person(user, team, channel, dm)
        if not self.door.allows(person.place):
            return  # ignored silently, as in a channel off the allowlist
        if not self.door.seen.first_time(f"{channel}:{ts}{edit}"):
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
        key = ConversationKey("slack", team, channel, root)
        self.latest[(team, channel, user)] = key
        code = direct_code(text)
        if code is not None:
            self.code_messages[(channel, ts)] = key
        context = await self.assistant.asked(channel, root, text, for_model=code is None)
        message = UserMessage(
            text, files, user=user, server=team, fetch=self.fetch, context=context
        )
        await self._react(channel, ts, "eyes", add=True)
        try:
            reply = self._reply(thread, user, team=team)
            await self.conversations.turn(
                self.door, person, key, message, reply, rerun_code=direct_rerun(text), quiet=True
            )
        finally:
            await self._react(channel, ts, "eyes", add=False)

    async def _edited(self, event: dict[str, Any], body: dict[str, Any]) -> None:
        """Editing a message of code that was run runs it again, in its conversation."""
        changed = dict(event.get("message") or {})
        channel = str(event.get("channel") or "")
        ts = str(changed.get("ts") or "")
        if (channel, ts) not in self.code_messages:
            return
        before = str((event.get("previous_message") or {}).get("text") or "")
        if before == changed.get("text"):
            return
        changed.update(channel=channel, channel_type=event.get("channel_type"))
        changed.pop("subtype", None)
        edited_at = str((changed.get("edited") or {}).get("ts") or event.get("event_ts") or "")
        await self._message(changed, body, mention=False, edit=f":edit:{edited_at}")

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

    def _reply(
        self, thread: SlackThread, owner: str, keep: bool = True, team: str = ""
    ) -> SlackReply:
        keep = keep and self.conversations.background.max_s > 0
        return StreamingSlackReply(
            thread,
            owner,
            self.streams,
            team or self.team,
            self.assistant.status_for(thread.channel, thread.thread_ts),
            max_files=self.settings.files_per_answer,
            keep=keep,
        )

    def reply_in(self, thread: SlackThread, owner: str) -> SlackReply:
        """A reply in `thread` for what nobody just asked for (a schedule's run, a run in
        the background), started by `owner`: with Stop, without Keep running."""
        return self._reply(thread, owner, keep=False)

    # ── people ────────────────────────────────────────────────────────────

    async def person(self, user: str, team: str, channel: str, dm: bool = False) -> Person:
        """Who acts, from where; in a DM, with where they are (for the allowlists)."""
        moderator = self._moderator(user)
        place = Place(user, team, channel, dm=dm or channel.startswith("D"))
        return Person(user, await self.presence.place(place), moderator, moderator)

    async def whereabouts(self, dm: Place) -> list[Place]:
        """Where a DM's sender is among the places the rules name: the allowed channels
        they are a member of (without a channel allowlist: the workspace the DM came
        through)."""
        channels = sorted(self.door.rules.channels)
        if not channels:
            return [Place(dm.user, dm.server)]
        return [
            Place(dm.user, dm.server, channel)
            for channel in channels
            if dm.user in await self._members(channel)
        ]

    async def _members(self, channel: str) -> frozenset[str]:
        """The members of an allowed channel (none, and not kept, when Slack would not
        say)."""
        try:
            return self.members.fresh(channel)
        except KeyError:
            pass
        members: set[str] = set()
        cursor = ""
        try:
            for _ in range(MEMBER_PAGES):
                page = await self.client.conversations_members(
                    channel=channel, limit=1000, cursor=cursor or None
                )
                members.update(str(member) for member in page.get("members") or [])
                cursor = str((page.get("response_metadata") or {}).get("next_cursor") or "")
                if not cursor:
                    break
            else:
                log.warning("channel %s has more members than are read for DMs", channel)
        except SlackApiError as exc:
            error = exc.response.get("error")
            log.warning("could not read the members of %s for a DM: %s", channel, error)
            return frozenset()
        found = frozenset(members)
        self.members.put(channel, found)
        return found

    def _moderator(self, user: str) -> Any:
        async def vouched() -> bool:
            """Configured admins, and the workspace's admins and owners."""
            if user in self.conversations.admins:
                return True
            try:
                found = await self.client.users_info(user=user)
            except SlackApiError:
                return False
            profile = found.get("user") or {}
            return bool(profile.get("is_admin") or profile.get("is_owner"))

        return vouched

    async def admitted(
        self, person: Person, channel: str, thread_ts: str | None = None, respond: Any = None
    ) -> bool:
        """The admission check of every command, shortcut and button; a refused person is
        told so (by `respond`, or in an ephemeral message)."""
        if self.door.allows(person.place):
            return True
        await self._tell(person.user, channel, thread_ts, respond, NOT_HERE)
        return False

    async def _tell(
        self, user: str, channel: str, thread_ts: str | None, respond: Any, text: str
    ) -> None:
        if respond is not None:
            await respond(text, response_type="ephemeral", replace_original=False)
        else:
            await SlackThread(self.client, channel, thread_ts).tell(user, text)

    # ── direct runs ───────────────────────────────────────────────────────

    async def start_run(
        self,
        code: str,
        person: Person,
        key: ConversationKey | None,
        thread_ts: str | None,
        background: bool = False,
        beside: bool = False,
        language: str = "",
    ) -> None:
        """/run, the modal, the shortcut, Re-run and edits: code run directly, in `key`'s
        session (None: a one-off session whose answer starts its own thread). `background`:
        it goes on in the background at once (`/run --background`); `beside`: it runs beside
        the conversation's run in the background rather than wait for it (`/run --beside`)."""
        place = person.place
        channel, team = place.channel or "", place.server or self.team
        if key is None:
            key = ConversationKey.one_off("slack", team, channel)
        elif not key.is_one_off:
            thread_ts = key.thread
            self.threads[(channel, thread_ts)] = True
        flag = f" {BACKGROUND_FLAG}" if background else f" {BESIDE_FLAG}" if beside else ""
        flag = with_language(flag, language)
        message = UserMessage(f"/run{flag}\n{code}", user=person.user, server=team)
        thread = SlackThread(self.client, channel, thread_ts)
        if key.is_one_off:
            self.one_offs[key.id] = thread
        try:
            reply = self._reply(thread, person.user)
            again = runnable_again(code, language)
            await self.conversations.turn(self.door, person, key, message, reply, rerun_code=again)
        finally:
            if key.is_one_off:
                self._forget_when_over(key)

    def thread_of(self, key: ConversationKey) -> str | None:
        """The thread a conversation's messages go in (None: the channel's top): its own;
        a one-off run's, the thread of its answer."""
        if key.is_one_off:
            answer = self.one_offs.get(key.id)
            return None if answer is None else answer.thread_ts
        return key.thread or None

    def _forget_when_over(self, key: ConversationKey) -> None:
        """A one-off run's thread is forgotten with its turn, or once its run in the
        background has been reported."""
        watching = [
            entry.watching
            for entry in self.conversations.background.runs.values()
            if entry.key == key and entry.watching is not None
        ]
        if not watching:
            self.one_offs.pop(key.id, None)
        for task in watching:
            task.add_done_callback(lambda _: self.one_offs.pop(key.id, None))

    async def _on_run(self, ack: Any, command: dict[str, Any], client: AsyncWebClient) -> None:
        await ack()
        flags, named, code = run_parts(unescape(str(command.get("text") or "")))
        channel, user = str(command["channel_id"]), str(command["user_id"])
        team = str(command.get("team_id") or self.team)
        person = await self.person(user, team, channel)
        if not await self.admitted(person, channel):
            return
        if len(flags) > 1:
            await self._tell(user, channel, None, None, BOTH_FLAGS)
            return
        if code.strip():
            named = named or known_tag(code)
            code = code_blocks(code) or code.strip()
            background, beside = BACKGROUND_FLAG in flags, BESIDE_FLAG in flags
            await self.start_run(
                code, person, self._here(person), None, background, beside, language=named
            )
            return
        await client.views_open(trigger_id=command["trigger_id"], view=run_modal(channel, team))

    def _here(self, person: Person) -> ConversationKey | None:
        """Where a slash command runs code: in a DM, the person's latest conversation there;
        in a channel, a one-off session of its own."""
        place = person.place
        if not place.dm:
            return None
        return self.latest.get((place.server or self.team, place.channel or "", person.user))

    async def _on_modal(self, ack: Any, body: dict[str, Any], view: dict[str, Any]) -> None:
        await ack()
        code, where = submitted(view)
        person = await self.person(
            str(body["user"]["id"]), where.get("team", self.team), where["channel"]
        )
        if await self.admitted(person, where["channel"]):
            await self.start_run(code, person, self._here(person), None)

    async def _on_run_code(self, ack: Any, shortcut: dict[str, Any]) -> None:
        await ack()
        message = shortcut.get("message") or {}
        channel = str((shortcut.get("channel") or {}).get("id") or "")
        team = str((shortcut.get("team") or {}).get("id") or self.team)
        person = await self.person(str(shortcut["user"]["id"]), team, channel)
        root = str(message.get("thread_ts") or message.get("ts") or "") or None
        if not await self.admitted(person, channel, root):
            return
        code = code_blocks(unescape(str(message.get("text") or "")))
        if code is None:
            await SlackThread(self.client, channel, root).tell(
                person.user, "That message has no code."
            )
            return
        # The code runs in the conversation of the thread the message is in.
        key = ConversationKey("slack", team, channel, root) if root else None
        await self.start_run(code, person, key, root)


def file_hosts(settings: SlackSettings) -> tuple[str, ...]:
    """Where the bot token may go for shared files (see `bot.platforms.file_hosts`)."""
    return shared_hosts(settings.file_hosts, SLACK_FILE_HOSTS, settings.api_url)
