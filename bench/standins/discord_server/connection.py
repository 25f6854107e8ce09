"""One gateway WebSocket connection and the session it carries (resumable after a drop)."""

from __future__ import annotations

import asyncio
import zlib
from dataclasses import dataclass, field

from aiohttp import web

from .payloads import dumps
from .world import JSON

try:
    import zstandard  # type: ignore[import-not-found, unused-ignore]
except ImportError:  # discord.py then asks for zlib-stream, which is always available
    zstandard = None  # type: ignore[assignment, unused-ignore]


@dataclass
class Session:
    id: str
    seq: int = 0
    log: list[tuple[int, str]] = field(default_factory=list)
    """Every dispatch of the session as (seq, JSON text), for replay on RESUME."""
    invalid: bool = False


@dataclass
class Link:
    """One shard's gateway: its session and the connection carrying it (shard 0 is the
    whole bot when it does not shard)."""

    session: Session | None = None
    conn: Connection | None = None
    ready_sent: bool = False


class Connection:
    """One gateway WebSocket; with zlib-stream, one compression context for its lifetime."""

    def __init__(self, ws: web.WebSocketResponse, compress: str | None) -> None:
        self.ws = ws
        self.session: Session | None = None
        self._zlib = zlib.compressobj() if compress == "zlib-stream" else None
        self._zstd = (
            zstandard.ZstdCompressor().compressobj()
            if compress == "zstd-stream" and zstandard is not None
            else None
        )
        self._lock = asyncio.Lock()

    async def send(self, payload: JSON | str) -> bool:
        text = payload if isinstance(payload, str) else dumps(payload)
        # The compression context is shared by every frame, so frames go out in order.
        async with self._lock:
            if self.ws.closed:
                return False
            try:
                if self._zlib is not None:
                    data = self._zlib.compress(text.encode()) + self._zlib.flush(zlib.Z_SYNC_FLUSH)
                    await self.ws.send_bytes(data)
                elif self._zstd is not None:
                    data = self._zstd.compress(text.encode())
                    data += self._zstd.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
                    await self.ws.send_bytes(data)
                else:
                    await self.ws.send_str(text)
            except (ConnectionError, RuntimeError):
                return False
            return True
