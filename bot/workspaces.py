"""Sessions' workspaces kept in the artifact storage (Azure Blob or local files), sealed, and
within caps per person and for the whole installation.

Each is encrypted with AES-GCM under a key made from the bot's link secret, with the
conversation's key as associated data: a workspace opens only for the conversation it was
saved for, whoever can read the store, and a copy moved under another conversation's name
fails to open. The time it was saved is inside the sealed part, for retention.

Its name says, without revealing either, whose it is (a keyed hash of the person who started
the session) and when it was saved: `workspaces/<conversation hash>/<owner>-<ms>.bin`. So one
listing of the store is enough to keep the caps: saving a workspace first removes the oldest
ones of the same person past `person_mb`, then the oldest of anyone past `total_mb`. Each
removed one leaves a small marker in its conversation's folder, so that the next session
there says it was removed, and why; a new save or a reset there clears it.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
import re
import struct
import time
from collections import OrderedDict
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from executor.errors import WorkspaceError
from executor.workspace import WorkspaceSettings
from storage.base import Storage, StoredObject
from storage.errors import StorageError
from storage.names import conversation_prefix

log = logging.getLogger(__name__)

MAGIC = b"CMW1"
PREFIX = "workspaces"
LEGACY_NAME = "workspace.bin"
"""What one conversation's workspace was called before workspaces had owners."""
NOBODY = "nobody"
"""The owner part of a workspace whose person is not known: it counts only in the total."""
SAVED = re.compile(r"^(?P<owner>[a-z0-9]{1,32})-(?P<ms>[0-9]{1,16})\.bin$")
REMOVED = re.compile(r"^removed-(?P<cap>person|total)-(?P<mb>[0-9]{1,9})-(?P<ms>[0-9]{1,16})$")
REMEMBERED_OWNERS = 10_000
MB = 1_000_000
"""As the executor counts a workspace's megabytes."""
DEFAULTS = WorkspaceSettings()

workspace_person: ContextVar[str] = ContextVar("workspace_person", default="")
"""Who the current turn or command is for (the platform's user id): a session started in
it, and so the workspace it saves, is theirs. The conversation service sets it."""


@dataclass(frozen=True, slots=True)
class _Kept:
    key: str
    folder: str
    owner: str
    saved_ms: int
    size: int


class StoredWorkspaces:
    def __init__(
        self,
        storage: Storage,
        secret: bytes,
        retention: timedelta,
        person_mb: int = DEFAULTS.person_mb,
        total_mb: int = DEFAULTS.total_mb,
    ) -> None:
        self._storage = storage
        self._secret = secret
        self._cipher = AESGCM(hmac.new(secret, b"cellmate workspaces", hashlib.sha256).digest())
        self._retention = retention
        self.person_mb = person_mb
        self.total_mb = total_mb
        self._owners: OrderedDict[str, str] = OrderedDict()
        """The person who started each session, from its first look at the store."""
        self._saving = asyncio.Lock()
        """Saves one at a time, so that two cannot both count the same room."""

    @staticmethod
    def folder(session: str) -> str:
        return f"{PREFIX}/{conversation_prefix(session)}/"

    def owner_tag(self, session: str, person: str) -> str:
        """A person's part of a workspace's name: a keyed hash of the platform and user id."""
        platform = session.split(":", 1)[0] if ":" in session else ""
        who = f"{platform}:{person}".encode()
        return hmac.new(self._secret, b"workspace owner\x00" + who, hashlib.sha256).hexdigest()[:24]

    async def save(self, key: str, data: bytes) -> None:
        nonce = os.urandom(12)
        now = time.time()
        sealed = (
            MAGIC + nonce + self._cipher.encrypt(nonce, struct.pack(">d", now) + data, _aad(key))
        )
        owner = self._owner(key)
        self._too_large(len(sealed))
        async with self._saving:
            kept = await self._listing()
            folder = self.folder(key)
            own = [item for item in kept if item.folder == folder]
            if owner == NOBODY and own:  # a session found again after a restart
                owner = max(own, key=lambda item: item.saved_ms).owner
            others = [item for item in kept if item.folder != folder]
            await self._make_room(others, owner, len(sealed))
            name = f"{folder}{owner}-{int(now * 1000)}.bin"
            try:
                await self._storage.put(name, sealed, "application/octet-stream")
            except StorageError as exc:
                raise WorkspaceError(f"storage: {exc}") from exc
            await self._clear(folder, keep=name)

    def _too_large(self, size: int) -> None:
        for cap, where in ((self.person_mb, "per person"), (self.total_mb, "in all")):
            if size > cap * MB:
                raise WorkspaceError(
                    f"it is {size / MB:,.1f} MB, more than the {cap:,} MB of workspaces the "
                    f"bot keeps {where}"
                )

    async def _make_room(self, others: list[_Kept], owner: str, size: int) -> None:
        """Remove the oldest workspaces of `owner` past the person cap, then the oldest of
        anyone past the total cap, so that `size` more bytes fit."""
        expired = time.time() * 1000 - self._retention.total_seconds() * 1000
        for item in [item for item in others if item.saved_ms < expired]:
            await self._remove(item, None)
        others = sorted((item for item in others if item.saved_ms >= expired), key=_age)
        if owner != NOBODY:
            mine = [item for item in others if item.owner == owner]
            used = sum(item.size for item in mine)
            for item in mine:
                if used + size <= self.person_mb * MB:
                    break
                await self._remove(item, "person")
                others.remove(item)
                used -= item.size
        used = sum(item.size for item in others)
        for item in list(others):
            if used + size <= self.total_mb * MB:
                break
            await self._remove(item, "total")
            used -= item.size

    async def _remove(self, item: _Kept, cap: str | None) -> None:
        """Delete a workspace; for a cap (not retention), leave a marker that says so."""
        try:
            if cap is not None:
                mb = self.person_mb if cap == "person" else self.total_mb
                marker = f"{item.folder}removed-{cap}-{mb}-{item.saved_ms}"
                await self._storage.put(marker, b"", "text/plain")
                log.info("removed a saved workspace of %d bytes (the %s cap)", item.size, cap)
            await self._storage.delete(item.key)
        except StorageError as exc:
            raise WorkspaceError(f"storage: {exc}") from exc

    async def load(self, key: str) -> bytes | None:
        person = workspace_person.get() or _dm_person(key)
        if person and key not in self._owners:
            self._owners[key] = self.owner_tag(key, person)
            while len(self._owners) > REMEMBERED_OWNERS:
                self._owners.popitem(last=False)
        folder = self.folder(key)
        found = await self._list(folder)
        saved = [item for item in found if _name(item) == LEGACY_NAME or SAVED.match(_name(item))]
        if not saved:
            removed = [m for m in (REMOVED.match(_name(item)) for item in found) if m]
            if removed:
                raise WorkspaceError(_removed_text(max(removed, key=lambda m: int(m["ms"]))))
            return None
        newest = max(saved, key=lambda item: _saved_ms(item) or 0)
        try:
            stored = await self._storage.get(newest.key)
        except StorageError as exc:
            raise WorkspaceError(f"storage: {exc}") from exc
        if stored is None:
            return None
        if not stored.startswith(MAGIC):
            raise WorkspaceError("the saved workspace is not one this bot wrote")
        nonce, sealed = stored[4:16], stored[16:]
        try:
            opened = self._cipher.decrypt(nonce, sealed, _aad(key))
        except InvalidTag:
            raise WorkspaceError(
                "the saved workspace does not open with this bot's secret for this conversation"
            ) from None
        (saved_at,) = struct.unpack(">d", opened[:8])
        if time.time() - saved_at > self._retention.total_seconds():
            await self.delete(key)
            return None
        return opened[8:]

    async def delete(self, key: str) -> None:
        self._owners.pop(key, None)
        await self._clear(self.folder(key), keep=None)

    def _owner(self, key: str) -> str:
        tag = self._owners.pop(key, None)
        if tag is None:
            person = _dm_person(key)
            tag = self.owner_tag(key, person) if person else NOBODY
        return tag

    async def _clear(self, folder: str, keep: str | None) -> None:
        """Delete everything in a conversation's folder but `keep`: older saves, markers."""
        for item in await self._list(folder):
            if item.key != keep:
                try:
                    await self._storage.delete(item.key)
                except StorageError as exc:
                    raise WorkspaceError(f"storage: {exc}") from exc

    async def _list(self, prefix: str) -> list[StoredObject]:
        try:
            return await self._storage.list(prefix)
        except StorageError as exc:
            raise WorkspaceError(f"storage: {exc}") from exc

    async def _listing(self) -> list[_Kept]:
        """Every saved workspace in the store, with its owner, time and size."""
        kept = []
        for item in await self._list(f"{PREFIX}/"):
            folder, _, name = item.key.rpartition("/")
            match = SAVED.match(name)
            if match is not None:
                owner, ms = match["owner"], int(match["ms"])
            elif name == LEGACY_NAME:
                owner, ms = NOBODY, int(item.created.timestamp() * 1000)
            else:
                continue
            kept.append(_Kept(item.key, folder + "/", owner, ms, item.size))
        return kept


def _age(item: _Kept) -> int:
    return item.saved_ms


def _name(item: StoredObject) -> str:
    return item.key.rpartition("/")[2]


def _saved_ms(item: StoredObject) -> int | None:
    match = SAVED.match(_name(item))
    if match is not None:
        return int(match["ms"])
    return int(item.created.timestamp() * 1000) if _name(item) == LEGACY_NAME else None


def _dm_person(key: str) -> str:
    """The person of a Discord DM conversation (`discord:dm:<user>:`), else ''."""
    parts = key.split(":")
    return parts[2] if len(parts) == 4 and parts[1] == "dm" else ""


def _removed_text(marker: re.Match[str]) -> str:
    saved = datetime.fromtimestamp(int(marker["ms"]) / 1000, UTC)
    when = f"{saved.day} {saved:%b %Y %H:%M} UTC"
    where = "per person" if marker["cap"] == "person" else "for everyone together"
    return (
        f"it was saved on {when} and removed to make room: the bot keeps at most "
        f"{int(marker['mb']):,} MB of workspaces {where}"
    )


def _aad(key: str) -> bytes:
    return b"cellmate workspace\x00" + key.encode("utf-8")
