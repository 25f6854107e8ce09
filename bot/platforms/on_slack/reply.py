"""Posting a turn into a Slack thread: the progress message, its edits, files, the answer."""

from __future__ import annotations

import logging
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.events import TurnEvent
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
    """Renders one turn into a thread; it is the turn's `emit`."""

    def __init__(
        self,
        thread: SlackThread,
        stop: tuple[str, str, str] | None,
        done: tuple[str, str, str] | None,
        interval: float = EDIT_INTERVAL_S,
        max_files: int = 10,
    ) -> None:
        self.thread = thread
        self.max_files = max_files
        self.stop = stop
        self.done = done
        self.view = TurnView()
        self.progress: str | None = None
        self.pacer = Pacer(self._draw, interval)

    async def start(self) -> str:
        text = ":hourglass_flowing_sand: Working on it…"
        self.progress = await self.thread.post(text, blocks(text, [self.stop] if self.stop else []))
        return self.progress

    def __call__(self, event: TurnEvent) -> None:
        self.view.apply(event)
        self.pacer.poke()

    async def _draw(self) -> None:
        if self.view.done or self.progress is None:
            return
        text = progress_text(self.view)
        if text:
            buttons = [self.stop] if self.stop else []
            await self.thread.update(self.progress, text, blocks(text, buttons))

    async def finish(self) -> None:
        await self.pacer.finish()
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
        buttons = [self.done] if self.done else []
        if self.progress is not None:
            # When no code ran, the progress message becomes the answer's first part.
            shown = final or texts[0]
            try:
                await self.thread.update(self.progress, shown, blocks(shown, buttons))
                if not final:
                    texts = texts[1:]
            except SlackApiError:
                log.warning("could not update the progress message", exc_info=True)
        for text in texts:
            await self.thread.post(text)


def _published(artifacts: list[Artifact]) -> list[Artifact]:
    return [a for a in artifacts if a.content is not None]
