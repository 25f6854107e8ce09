"""After a run, publish its charts and files, and describe them in a manifest.

The manifest, not the model, is what users see: every image output and every file the run
created or changed gets an entry with a link (or the reason it has none). Keys are
`<conversation hash>/<run id>/<sanitised name>`, so nothing a user writes steers them.
Storage failures never raise from here: the entry says `failed`, and the answer still goes out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Literal

from storage.base import Storage
from storage.content_types import CHAT_EMBEDDABLE_IMAGES
from storage.errors import StorageError
from storage.names import artifact_key, new_run_id, unique_names

PARALLEL_UPLOADS = 4

ArtifactStatus = Literal["published", "skipped", "failed"]


@dataclass(frozen=True, slots=True)
class Artifact:
    name: str
    size: int
    content_type: str
    status: ArtifactStatus
    link: str | None = None
    inline_image: bool = False
    """A chat platform can show it as an embedded picture."""
    reason: str = ""
    key: str | None = None
    content: bytes | None = None
    """The bytes, for front ends that attach files natively (not kept in any record)."""

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "size": self.size,
            "content_type": self.content_type,
            "status": self.status,
            "link": self.link,
            "inline_image": self.inline_image,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class ArtifactLimits:
    max_bytes: int = 25_000_000
    max_count: int = 50
    link_expiry: timedelta = timedelta(days=7)


@dataclass(frozen=True, slots=True)
class ArtifactSource:
    """Something a run produced: a chart or a file, with the name it should be shown under."""

    name: str
    content: bytes
    content_type: str


async def publish(
    storage: Storage,
    conversation: str,
    sources: Sequence[ArtifactSource],
    limits: ArtifactLimits | None = None,
    run_id: str | None = None,
) -> list[Artifact]:
    """Upload a run's charts and files; return the manifest, in the order given."""
    limits = limits or ArtifactLimits()
    run_id = run_id or new_run_id()
    names = unique_names([source.name for source in sources])
    gate = asyncio.Semaphore(PARALLEL_UPLOADS)

    async def one(index: int, name: str, source: ArtifactSource) -> Artifact:
        entry = Artifact(
            name=name,
            size=len(source.content),
            content_type=source.content_type,
            status="skipped",
            inline_image=source.content_type in CHAT_EMBEDDABLE_IMAGES,
        )
        if index >= limits.max_count:
            return replace(entry, reason=f"more than {limits.max_count} files in one run")
        if len(source.content) > limits.max_bytes:
            return replace(entry, reason=f"larger than {limits.max_bytes / 1e6:g} MB")
        key = artifact_key(conversation, run_id, name)
        async with gate:
            try:
                await storage.put(
                    key, source.content, source.content_type, max_bytes=limits.max_bytes
                )
                link = await storage.link(key, limits.link_expiry)
            except StorageError as exc:
                return replace(entry, status="failed", reason=str(exc), content=source.content)
        return replace(entry, status="published", link=link, key=key, content=source.content)

    jobs = [
        one(i, name, source) for i, (name, source) in enumerate(zip(names, sources, strict=True))
    ]
    return list(await asyncio.gather(*jobs))
