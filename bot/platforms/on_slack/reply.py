"""Posting a turn into a Slack thread: the progress message, its edits, files, the answer."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Sequence
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.events import ApprovalDecided, ApprovalRequested, TurnEvent
from bot.platforms.on_slack.approval import decided_message, request_files, request_message
from bot.platforms.on_slack.render import answer_texts, blocks, progress_text, uploads
from bot.platforms.progress import Pacer, TurnView, shown_artifacts
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


class SlackReply:
    """Renders one turn into a thread (the conversation service's `Reply`)."""

    def __init__(
        self,
        thread: SlackThread,
        owner: str,
        interval: float = EDIT_INTERVAL_S,
        max_files: int = 10,
    ) -> None:
        self.thread = thread
        self.owner = owner
        """Who asked: refusals are shown to them alone."""
        self.max_files = max_files
        self.stop: tuple[str, str, str] | None = None
        self.view = TurnView()
        self.progress: str | None = None
        self.pacer = Pacer(self._draw, interval)
        self.approvals: dict[str, tuple[ApprovalRequested, str]] = {}
        """Approval messages (their ts) by key, with what they asked."""

    async def queued(self, stop: str, text: str) -> None:
        self.stop = ("cm_stop", "Stop", stop)
        await self._show(f":hourglass_flowing_sand: {text}")

    async def start(self, stop: str) -> None:
        self.stop = ("cm_stop", "Stop", stop)
        await self._show(":hourglass_flowing_sand: Working on it…")

    async def _show(self, text: str) -> None:
        shown = blocks(text, [self.stop] if self.stop else [])
        if self.progress is None:
            self.progress = await self.thread.post(text, shown)
            if self.thread.thread_ts is None:
                # A /run result in a channel starts its own thread: the answer goes under it.
                self.thread.thread_ts = self.progress
        else:
            await self.thread.update(self.progress, text, shown)

    def __call__(self, event: TurnEvent) -> Awaitable[None] | None:
        self.view.apply(event)
        self.pacer.poke()
        if isinstance(event, ApprovalRequested):
            return self._ask(event)
        if isinstance(event, ApprovalDecided):
            return self._decided(event)
        return None

    async def _ask(self, event: ApprovalRequested) -> None:
        files = request_files(event)
        if files:
            await self.thread.upload(files)
        text, shown = request_message(event)
        self.approvals[event.key] = (event, await self.thread.post(text, shown))

    async def _decided(self, event: ApprovalDecided) -> None:
        found = self.approvals.pop(event.key, None)
        if found is None:
            return
        asked, ts = found
        text, shown = decided_message(asked, event)
        try:
            await self.thread.update(ts, text, shown)
        except SlackApiError:
            log.warning("could not update the approval message", exc_info=True)

    async def _draw(self) -> None:
        if self.view.done or self.progress is None:
            return
        text = progress_text(self.view)
        if text:
            buttons = [self.stop] if self.stop else []
            await self.thread.update(self.progress, text, blocks(text, buttons))

    async def finish(self, rerun: str | None, notices: Sequence[str]) -> None:
        await self.pacer.finish()
        self.view.notices.extend(notices)
        files, missing = uploads(self.view, self.max_files)
        not_uploaded = list(missing)
        if files:
            try:
                await self.thread.upload(files)
            except SlackApiError as exc:
                log.warning("file upload failed: %s", exc.response.get("error"))
                attached, _ = shown_artifacts(self.view, self.max_files)
                not_uploaded += _published(attached)
        texts = answer_texts(self.view, not_uploaded, self.max_files)
        final = progress_text(self.view)
        buttons = [("cm_rerun", "Re-run", rerun)] if rerun is not None else []
        if self.progress is not None:
            # When no code ran, the progress message becomes the answer's first part.
            shown = final or (texts[0] if texts else "")
            try:
                await self.thread.update(self.progress, shown, blocks(shown, buttons))
                if not final:
                    texts = texts[1:]
            except SlackApiError:
                log.warning("could not update the progress message", exc_info=True)
        for text in texts:
            if text.strip():
                await self.thread.post(text)

    async def refused(self, text: str) -> None:
        if self.progress is not None:
            await self.thread.update(self.progress, text, blocks(text, []))
        else:
            await self.thread.tell(self.owner, text)

    async def failed(self, text: str) -> None:
        await self.thread.post(f":x: {text}")


def _published(artifacts: list[Artifact]) -> list[Artifact]:
    return [a for a in artifacts if a.content is not None]
