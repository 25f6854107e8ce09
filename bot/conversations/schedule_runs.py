"""One run of a schedule: the conversation's cells in a fresh sandbox of that conversation (its
place's grants and policy, a copy of its files), posted in its thread by the platform's
`Poster` as any direct run is, with a heading that names the schedule and its owner and a
note of what changed since the schedule's last run."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from bot.conversations.keys import ConversationKey
from bot.conversations.people import Admission, Person
from bot.conversations.reply import Reply
from bot.events import ArtifactsPublished, OutputChunk, TurnEvent

log = logging.getLogger(__name__)

COPIED_MAX_BYTES = 200_000_000
"""The most of a conversation's /mnt/data a schedule's fresh sandbox gets a copy of."""
OUTPUT_KEPT_CHARS = 20_000
"""The most of a run's output kept to compare the next run with."""


class Poster(Protocol):
    """How a platform posts what nobody just asked for (a schedule's run) in a conversation."""

    door: Admission

    async def person(self, user: str, key: ConversationKey) -> Person:
        """The schedule's owner, as a person of `key`'s place now (for the allowlist, which
        may name roles, and quotas)."""

    def mention(self, user: str) -> str:
        """How a message names `user` so that they are notified."""

    async def reply_in(self, key: ConversationKey, owner: str) -> Reply:
        """A reply that posts a turn's answer in the conversation's thread; `owner` started
        it (the schedule's owner)."""

    async def say(self, key: ConversationKey, text: str, notify: str = "") -> None:
        """One plain message in the conversation's thread; `notify`: the user its mention
        notifies (no other mention in it does)."""


@dataclass
class Recorded:
    """What a run showed, to compare the next one with."""

    text: list[str] = field(default_factory=list)
    charts: list[tuple[str, str]] = field(default_factory=list)
    answered: bool = False
    """The run got to its answer (it was not refused or broken before it)."""

    @property
    def output(self) -> str:
        return "\n".join(self.text)[-OUTPUT_KEPT_CHARS:]


class RecordingReply:
    """The platform's reply, with the run's output recorded on the way and the note of what
    changed added to its answer."""

    def __init__(self, inner: Reply, note: Callable[[Recorded], str]) -> None:
        self.inner = inner
        self.note = note
        self.recorded = Recorded()

    async def queued(self, stop: str, text: str) -> None:
        await self.inner.queued(stop, text)

    async def start(self, stop: str) -> None:
        await self.inner.start(stop)

    def __call__(self, event: TurnEvent) -> Awaitable[None] | None:
        if isinstance(event, OutputChunk):
            output = event.output
            if output.kind in ("stdout", "stderr"):
                self.recorded.text.append(output.text)
            elif output.result is not None:
                self.recorded.text.append(output.result.text)
            elif output.error is not None:
                self.recorded.text.append(f"{output.error.name}: {output.error.value}")
        elif isinstance(event, ArtifactsPublished):
            for artifact in event.artifacts:
                if artifact.inline_image and artifact.link:
                    self.recorded.charts.append((artifact.name, artifact.link))
        return self.inner(event)

    async def finish(self, rerun: str | None, notices: Sequence[str]) -> None:
        self.recorded.answered = True
        note = self.note(self.recorded)
        await self.inner.finish(None, [*notices, note] if note else notices)

    async def refused(self, text: str) -> None:
        await self.inner.refused(text)

    async def failed(self, text: str) -> None:
        await self.inner.failed(text)


async def copy_files(
    read: Callable[[], Awaitable[list[tuple[str, int]]]],
    get: Callable[[str], Awaitable[bytes | None]],
    limit: int = COPIED_MAX_BYTES,
) -> tuple[dict[str, bytes], list[str]]:
    """The files of a live session, up to `limit` bytes in all, and the names left out."""
    copied: dict[str, bytes] = {}
    left: list[str] = []
    total = 0
    for path, size in await read():
        if total + size > limit:
            left.append(path)
            continue
        data = await get(path)
        if data is None:
            continue
        copied[path] = data
        total += len(data)
    return copied, left
