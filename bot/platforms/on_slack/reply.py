"""A turn in a Slack thread: the thread's API calls, and the progress message, its edits,
files and the answer made of them."""

from __future__ import annotations

import logging
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.events import ApprovalDecided, ApprovalRequested, InputAnswered, InputRequested
from bot.platforms.on_slack.approval import decided_message, request_files, request_message
from bot.platforms.on_slack.prompts import answered_message, prompt_message
from bot.platforms.on_slack.render import MARKS, answer_texts, blocks, progress_text, uploads
from bot.platforms.progress import shown_artifacts
from bot.platforms.turn_reply import TurnReply
from storage.artifacts import Artifact

log = logging.getLogger(__name__)

EDIT_INTERVAL_S = 1.5
"""chat.update is rate-limited per channel (Tier 3); one edit per 1.5 s stays well inside."""


class SlackThread:
    """Messages in one thread (`thread_ts`), or at the top of a channel when it is None."""

    def __init__(self, client: AsyncWebClient, channel: str, thread_ts: str | None) -> None:
        self.client = client
        self.channel = channel
        self.thread_ts = thread_ts

    async def post(self, text: str, shown: list[dict[str, Any]] | None = None) -> str:
        response = await self.client.chat_postMessage(
            channel=self.channel,
            thread_ts=self.thread_ts,
            text=text,
            blocks=shown,
            unfurl_links=False,
            unfurl_media=False,
        )
        return str(response["ts"])

    async def update(self, ts: str, text: str, shown: list[dict[str, Any]] | None) -> None:
        await self.client.chat_update(channel=self.channel, ts=ts, text=text, blocks=shown or [])

    async def upload(self, files: list[tuple[str, bytes]]) -> None:
        await self.client.files_upload_v2(
            channel=self.channel,
            thread_ts=self.thread_ts,
            file_uploads=[
                {"content": data, "filename": name, "title": name} for name, data in files
            ],
        )

    async def tell(self, user: str, text: str) -> None:
        """A message only `user` sees."""
        await self.client.chat_postEphemeral(
            channel=self.channel, user=user, text=text, thread_ts=self.thread_ts
        )


class SlackReply(TurnReply[str]):
    """One turn in a thread (see `TurnReply`): messages are known by their ts; files are
    uploaded into the thread before the answer."""

    marks = MARKS
    api_error = SlackApiError

    def __init__(
        self,
        thread: SlackThread,
        owner: str,
        interval: float = EDIT_INTERVAL_S,
        max_files: int = 10,
        keep: bool = False,
    ) -> None:
        super().__init__(interval)
        self.thread = thread
        self.owner = owner
        """Who asked: refusals are shown to them alone."""
        self.max_files = max_files
        self.keep = keep
        """Offer Keep running beside Stop (runs may go on in the background)."""

    def controls(self, kind: str, key: str) -> list[tuple[str, str, str]]:
        if kind == "rerun":
            return [("cm_rerun", "Re-run", key)]
        shown = [("cm_stop", "Stop", key)]
        if self.keep:
            shown.append(("cm_keep", "Keep running", key))
        if kind == "beside":
            shown.append(("cm_beside", "Run beside", key))
        return shown

    def progress_text(self) -> str:
        return progress_text(self.view)

    async def post(self, text: str, controls: Any = None) -> str:
        ts = await self.thread.post(text, blocks(text, controls or []))
        if self.thread.thread_ts is None:
            # A /run result in a channel starts its own thread: the answer goes under it.
            self.thread.thread_ts = ts
        return ts

    async def edit(self, message: str, text: str, controls: Any = None) -> str:
        await self.thread.update(message, text, blocks(text, controls or []))
        return message

    async def say(self, text: str) -> None:
        await self.thread.post(text)

    async def tell(self, text: str) -> None:
        await self.thread.tell(self.owner, text)

    async def ask(self, event: ApprovalRequested) -> str:
        files = request_files(event)
        if files:
            await self.thread.upload(files)
        text, shown = request_message(event)
        return await self.thread.post(text, shown)

    async def decided(self, message: str, asked: ApprovalRequested, event: ApprovalDecided) -> None:
        text, shown = decided_message(asked, event)
        await self.thread.update(message, text, shown)

    async def ask_input(self, event: InputRequested) -> str:
        text, shown = prompt_message(event)
        return await self.thread.post(text, shown)

    async def input_answered(
        self, message: str, asked: InputRequested, event: InputAnswered
    ) -> None:
        text, shown = answered_message(asked, event)
        await self.thread.update(message, text, shown)

    async def upload_files(self) -> list[Artifact]:
        """The turn's charts and files, uploaded into the thread; what could not be shown
        there (over the cap, or refused by Slack) is returned, to be listed as links."""
        files, missing = uploads(self.view, self.max_files)
        not_uploaded = list(missing)
        if files:
            try:
                await self.thread.upload(files)
            except SlackApiError as exc:
                log.warning("file upload failed: %s", exc.response.get("error"))
                attached, _ = shown_artifacts(self.view, self.max_files)
                not_uploaded += _published(attached)
        return not_uploaded

    async def answer(self, rerun: Any) -> None:
        not_uploaded = await self.upload_files()
        texts = answer_texts(self.view, not_uploaded, self.max_files)
        final = progress_text(self.view)
        if self.progress is not None:
            # When no code ran, the progress message becomes the answer's first part.
            shown = final or (texts[0] if texts else "")
            try:
                await self.edit(self.progress, shown, rerun)
                if not final:
                    texts = texts[1:]
            except SlackApiError:
                log.warning("could not update the progress message", exc_info=True)
        for text in texts:
            if text.strip():
                await self.thread.post(text)


def _published(artifacts: list[Artifact]) -> list[Artifact]:
    return [a for a in artifacts if a.content is not None]
