"""Links in chat messages that do not rot: `<bot url>/a/<opaque id>`, on the bot's own HTTP
server, instead of a signed link that expires while the message stays.

The id is the storage key sealed (AES-GCM, its nonce made from the key, so one file keeps
one id) under a key made from the bot's link secret: it reveals nothing, cannot be made up
or changed, and needs no table, so ids survive restarts as long as the secret does. On each
click the bot checks the file still exists and redirects to a freshly signed link of
minutes; only retention (the file's removal) ends a stable link.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from datetime import timedelta

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from storage.base import Data, Storage, StoredObject
from storage.names import check_key

CLICK_EXPIRY = timedelta(minutes=10)
PURPOSE = b"cellmate stable links"


class StableLinks:
    """A Storage whose links are stable ones; everything else goes to `inner`."""

    def __init__(
        self, inner: Storage, secret: bytes, bot_url: str, click_expiry: timedelta = CLICK_EXPIRY
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self.bot_url = bot_url.rstrip("/")
        self.click_expiry = click_expiry
        self._nonce_key = hmac.new(secret, PURPOSE + b" nonce", hashlib.sha256).digest()
        self._cipher = AESGCM(hmac.new(secret, PURPOSE, hashlib.sha256).digest())

    def link_id(self, key: str) -> str:
        nonce = hmac.new(self._nonce_key, key.encode(), hashlib.sha256).digest()[:12]
        sealed = self._cipher.encrypt(nonce, key.encode(), PURPOSE)
        return base64.urlsafe_b64encode(nonce + sealed).decode().rstrip("=")

    def key_of(self, link_id: str) -> str | None:
        """The storage key an id was made for; None for an id this bot did not make."""
        try:
            raw = base64.urlsafe_b64decode(link_id + "=" * (-len(link_id) % 4))
            key = self._cipher.decrypt(raw[:12], raw[12:], PURPOSE).decode()
            return check_key(key)
        except (ValueError, binascii.Error, InvalidTag):
            return None

    async def resolve(self, link_id: str) -> str | None:
        """A freshly signed short link to the file behind an id, or None when the id is not
        one of ours or its file is gone (retention)."""
        key = self.key_of(link_id)
        if key is None or not await self.inner.exists(key):
            return None
        return await self.inner.link(key, self.click_expiry)

    async def link(self, key: str, expires_in: timedelta | None = None) -> str:
        check_key(key)
        return f"{self.bot_url}/a/{self.link_id(key)}"

    async def check(self) -> None:
        await self.inner.check()

    async def put(
        self, key: str, data: Data, content_type: str, max_bytes: int | None = None
    ) -> StoredObject:
        return await self.inner.put(key, data, content_type, max_bytes)

    async def exists(self, key: str) -> bool:
        return await self.inner.exists(key)

    async def get(self, key: str) -> bytes | None:
        return await self.inner.get(key)

    async def delete(self, key: str) -> None:
        await self.inner.delete(key)

    async def list(self, prefix: str = "") -> list[StoredObject]:
        return await self.inner.list(prefix)

    async def close(self) -> None:
        await self.inner.close()
