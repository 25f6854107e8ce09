"""The one seam for storing artifacts; `local.py` and `azure_blob.py` implement it."""

from __future__ import annotations

from collections.abc import AsyncIterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

DEFAULT_LINK_EXPIRY = timedelta(days=7)

Data = bytes | AsyncIterable[bytes]


@dataclass(frozen=True, slots=True)
class StoredObject:
    key: str
    size: int
    content_type: str
    created: datetime


class Storage(Protocol):
    name: str
    """`local` or `azure`, for messages and health checks."""

    async def check(self) -> None:
        """Fail at start-up, once and clearly, when the store cannot be used."""

    async def put(
        self, key: str, data: Data, content_type: str, max_bytes: int | None = None
    ) -> StoredObject:
        """Store data under a key made by `storage.names`; StorageError if it cannot."""

    async def link(self, key: str, expires_in: timedelta | None = None) -> str:
        """A read-only link that stops working after `expires_in` (default 7 days)."""

    async def exists(self, key: str) -> bool:
        """Whether something is stored under the key; StorageError if the store cannot say."""

    async def get(self, key: str) -> bytes | None:
        """The bytes stored under a key, None when there are none; StorageError if the store
        cannot be read."""

    async def delete(self, key: str) -> None: ...

    async def list(self, prefix: str = "") -> list[StoredObject]: ...

    async def close(self) -> None: ...
