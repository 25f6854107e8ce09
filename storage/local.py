"""Artifacts as files under a data directory, with signed, expiring links.

Links are `file://` paths for the console, or, when the operator sets a base URL, HTTP links
to the bot's `/files/` route carrying an expiry and an HMAC signature. A request reaches the
file system only after its key passed `check_key` and its signature verified; the directory
is never listed.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import time
from collections.abc import AsyncIterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

from storage.base import DEFAULT_LINK_EXPIRY, Data, StoredObject
from storage.errors import InvalidKey, StorageError, StorageUnavailable
from storage.names import check_key

META_SUFFIX = ".meta.json"


@dataclass(frozen=True, slots=True)
class LocalFile:
    path: Path
    content_type: str
    size: int


class LocalStorage:
    name = "local"

    def __init__(
        self,
        root: Path,
        secret: bytes,
        base_url: str | None = None,
        default_expiry: timedelta = DEFAULT_LINK_EXPIRY,
    ) -> None:
        if len(secret) < 16:
            raise ValueError("the link-signing secret must be at least 16 bytes")
        self.root = root.resolve()
        self.base_url = base_url.rstrip("/") if base_url else None
        self.default_expiry = default_expiry
        self._secret = secret

    async def check(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            probe = self.root / f".probe-{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise StorageUnavailable(
                f"the artifact folder {self.root} is not writable: {exc}"
            ) from exc

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    async def put(
        self, key: str, data: Data, content_type: str, max_bytes: int | None = None
    ) -> StoredObject:
        path = self._path(key)
        chunks = [data] if isinstance(data, bytes) else [c async for c in _bounded(data, max_bytes)]
        content = b"".join(chunks)
        if max_bytes is not None and len(content) > max_bytes:
            raise StorageError(f"{key.rsplit('/', 1)[-1]} is larger than {max_bytes:,} bytes")
        created = datetime.now(UTC)

        def write() -> None:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(path.name + ".partial")
            partial.write_bytes(content)
            meta = {"content_type": content_type, "created": created.isoformat()}
            path.with_name(path.name + META_SUFFIX).write_text(json.dumps(meta))
            partial.replace(path)

        try:
            await asyncio.to_thread(write)
        except OSError as exc:
            raise StorageUnavailable(f"could not write {key}: {exc}") from exc
        return StoredObject(key=key, size=len(content), content_type=content_type, created=created)

    async def link(self, key: str, expires_in: timedelta | None = None) -> str:
        path = self._path(key)
        if self.base_url is None:
            return path.as_uri()
        expires = int(time.time() + (expires_in or self.default_expiry).total_seconds())
        return f"{self.base_url}/files/{quote(key)}?expires={expires}&sig={self.sign(key, expires)}"

    def sign(self, key: str, expires: int) -> str:
        message = f"{key}\n{expires}".encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    def open_signed(self, key: str, expires: str, signature: str) -> LocalFile | None:
        """The file behind a link, or None for a bad key, a bad or old signature, or no file."""
        try:
            check_key(key)
            expiry = int(expires)
        except (InvalidKey, ValueError):
            return None
        if expiry < time.time() or not hmac.compare_digest(self.sign(key, expiry), signature):
            return None
        path = self.root / key
        try:
            meta = json.loads(path.with_name(path.name + META_SUFFIX).read_text())
            size = path.stat().st_size
        except (OSError, ValueError):
            return None
        if not path.is_file() or path.is_symlink():
            return None
        return LocalFile(path=path, content_type=str(meta.get("content_type")), size=size)

    async def exists(self, key: str) -> bool:
        path = self._path(key)
        return await asyncio.to_thread(lambda: path.is_file() and not path.is_symlink())

    async def get(self, key: str) -> bytes | None:
        path = self._path(key)

        def read() -> bytes | None:
            if path.is_symlink() or not path.is_file():
                return None
            return path.read_bytes()

        try:
            return await asyncio.to_thread(read)
        except OSError as exc:
            raise StorageUnavailable(f"could not read {key}: {exc}") from exc

    async def delete(self, key: str) -> None:
        path = self._path(key)
        for target in (path, path.with_name(path.name + META_SUFFIX)):
            try:
                await asyncio.to_thread(target.unlink, True)
            except OSError as exc:
                raise StorageUnavailable(f"could not delete {key}: {exc}") from exc

    async def list(self, prefix: str = "") -> list[StoredObject]:
        def scan() -> list[StoredObject]:
            found = []
            for meta_path in sorted(self.root.rglob(f"*{META_SUFFIX}")):
                path = meta_path.with_name(meta_path.name.removesuffix(META_SUFFIX))
                key = path.relative_to(self.root).as_posix()
                if not key.startswith(prefix) or not path.is_file():
                    continue
                try:
                    meta = json.loads(meta_path.read_text())
                    created = datetime.fromisoformat(meta["created"])
                except (OSError, ValueError, KeyError):
                    continue
                found.append(
                    StoredObject(key, path.stat().st_size, str(meta.get("content_type")), created)
                )
            return found

        return await asyncio.to_thread(scan)

    async def close(self) -> None:
        return None


async def _bounded(data: AsyncIterable[bytes], max_bytes: int | None) -> AsyncIterable[bytes]:
    total = 0
    async for chunk in data:
        total += len(chunk)
        if max_bytes is not None and total > max_bytes:
            raise StorageError(f"the file is larger than {max_bytes:,} bytes")
        yield chunk
