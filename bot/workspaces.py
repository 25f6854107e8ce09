"""Sessions' workspaces kept in the artifact storage (Azure Blob or local files), sealed.

Each is encrypted with AES-GCM under a key made from the bot's link secret, with the
conversation's key as associated data: a workspace opens only for the conversation it was
saved for, whoever can read the store, and a copy moved under another conversation's name
fails to open. The time it was saved is inside the sealed part, for retention.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
import time
from datetime import timedelta

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from executor.errors import WorkspaceError
from storage.base import Storage
from storage.errors import StorageError
from storage.names import conversation_prefix

MAGIC = b"CMW1"
PREFIX = "workspaces"


class StoredWorkspaces:
    def __init__(self, storage: Storage, secret: bytes, retention: timedelta) -> None:
        self._storage = storage
        self._cipher = AESGCM(hmac.new(secret, b"cellmate workspaces", hashlib.sha256).digest())
        self._retention = retention

    @staticmethod
    def storage_key(session: str) -> str:
        return f"{PREFIX}/{conversation_prefix(session)}/workspace.bin"

    async def save(self, key: str, data: bytes) -> None:
        nonce = os.urandom(12)
        sealed = self._cipher.encrypt(nonce, struct.pack(">d", time.time()) + data, _aad(key))
        try:
            await self._storage.put(
                self.storage_key(key), MAGIC + nonce + sealed, "application/octet-stream"
            )
        except StorageError as exc:
            raise WorkspaceError(f"storage: {exc}") from exc

    async def load(self, key: str) -> bytes | None:
        try:
            stored = await self._storage.get(self.storage_key(key))
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
        try:
            await self._storage.delete(self.storage_key(key))
        except StorageError as exc:
            raise WorkspaceError(f"storage: {exc}") from exc


def _aad(key: str) -> bytes:
    return b"cellmate workspace\x00" + key.encode("utf-8")
