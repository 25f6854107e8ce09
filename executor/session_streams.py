"""Files of a session's /mnt/data read and written in chunks (wire `ReadChunk`,
`WriteChunk`), so a file larger than one protocol line moves in many and neither side
holds it whole.

A read takes the session's lock for each chunk only: runs go on between chunks, and a
file changed or replaced meanwhile ends the read with SandboxError (each chunk names the
version it came from). A write holds the lock until the file is in place: runs wait for
it, as for `put_files`. It goes into a hidden partial file beside its target, put in
place by its last chunk; a refusal (a link, a FIFO, a folder, a full disk, the file size
limit) or a failure of the caller's chunks removes it, so no partial file stays.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Iterable

from executor import wire
from executor.errors import InvalidInput, SandboxError
from executor.limits import SandboxLimits
from executor.runner_client import REQUEST_TIMEOUT_S, RunnerClient
from executor.session_live import LiveSessions
from executor.session_paths import safe_relative

CHUNK_BYTES = 1024 * 1024
"""The chunk size of a read when the caller names none, and of every write."""
ABORT_TIMEOUT_S = 10.0
MIB = 1024 * 1024
"""The sandbox's sizes (`file_size_mb`, `data_mb`) are in MiB, as the engine applies them."""


def checked_path(path: str, doing: str) -> str:
    if not safe_relative(path) or not wire_path_ok(path):
        raise InvalidInput(
            f"could not {doing} {path!r}: the path must be relative to /mnt/data, without '..'"
        )
    return path


def wire_path_ok(path: str) -> bool:
    try:
        wire.stream_path(path)
    except wire.Malformed:
        return False
    return True


async def read_stream(
    sessions: LiveSessions, key: str, path: str, chunk_size: int = CHUNK_BYTES
) -> AsyncIterator[bytes]:
    """The file's bytes, chunk by chunk (at most `chunk_size` each). InvalidInput when it
    cannot be read (missing, a link, a FIFO, a folder, a path out of /mnt/data, no live
    session), SandboxError when the sandbox fails or the file changes meanwhile."""
    checked_path(path, "read")
    if not 1 <= chunk_size <= wire.MAX_CHUNK_BYTES:
        raise InvalidInput(f"chunk_size must be between 1 and {wire.MAX_CHUNK_BYTES} bytes")
    offset, version = 0, None
    while True:
        async with sessions.lock(key):
            live = sessions.live(key)
            if live is None:
                raise InvalidInput(f"could not read {path!r}: the session has not started")
            try:
                chunk = await RunnerClient(live.lease.sandbox).read_chunk(path, offset, chunk_size)
            except TimeoutError:
                raise SandboxError(
                    f"the sandbox did not read {path!r} within {REQUEST_TIMEOUT_S:g} s"
                ) from None
            if chunk is None:
                raise SandboxError(f"the sandbox stopped before it could read {path!r}")
            live.last_used = time.monotonic()
        if chunk.error:
            raise InvalidInput(f"could not read {path!r}: {chunk.error}")
        if chunk.offset != offset or len(chunk.data) > chunk_size:
            raise SandboxError(f"the sandbox answered another part of {path!r} than asked")
        if version is not None and chunk.version != version:
            raise SandboxError(f"{path!r} changed while it was read; read it again")
        version = chunk.version
        if chunk.data:
            yield chunk.data
        offset += len(chunk.data)
        if chunk.eof:
            return
        if not chunk.data:
            raise SandboxError(f"the sandbox sent no bytes of {path!r} before its end")


async def write_stream(
    sessions: LiveSessions,
    limits: SandboxLimits,
    key: str,
    path: str,
    chunks: Iterable[bytes] | AsyncIterable[bytes],
) -> int:
    """Write the file from `chunks` (bytes, any sizes) in the key's session, started if
    needed; the bytes written. A file larger than the sandbox's file size limit (or its
    /mnt/data) is refused as soon as it is, and nothing of it stays."""
    checked_path(path, "write")
    cap = min(limits.file_size_mb, limits.data_mb) * MIB
    upload = uuid.uuid4().hex
    async with sessions.lock(key):
        live = await sessions.open(key)
        client = RunnerClient(live.lease.sandbox)
        written, held, finished = 0, bytearray(), False
        try:
            async for piece in _pieces(chunks):
                held += piece
                if written + len(held) > cap:
                    raise InvalidInput(
                        f"could not write {path!r}: it is larger than the sandbox allows "
                        f"({cap // MIB} MB); nothing was kept"
                    )
                while len(held) > CHUNK_BYTES:
                    written = await _send(client, upload, path, written, bytes(held[:CHUNK_BYTES]))
                    del held[:CHUNK_BYTES]
            written = await _send(client, upload, path, written, bytes(held), last=True)
            finished = True
        finally:
            if not finished and live.lease.sandbox.alive:
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(ABORT_TIMEOUT_S):
                        await client.write_chunk(upload, path, 0, b"", abort=True)
            live.last_used = time.monotonic()
    return written


async def _send(
    client: RunnerClient, upload: str, path: str, offset: int, data: bytes, last: bool = False
) -> int:
    try:
        reply = await client.write_chunk(upload, path, offset, data, last=last)
    except TimeoutError:
        raise SandboxError(
            f"the sandbox did not write {path!r} within {REQUEST_TIMEOUT_S:g} s"
        ) from None
    if reply is None:
        raise SandboxError(f"the sandbox stopped before it could write {path!r}")
    if reply.error:
        raise InvalidInput(f"could not write {path!r}: {reply.error}")
    if reply.written != offset + len(data) or (last and not reply.done):
        raise SandboxError(f"the sandbox wrote another part of {path!r} than sent")
    return reply.written


async def _pieces(chunks: Iterable[bytes] | AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    """The caller's chunks, sync or async, each checked to be bytes."""
    if isinstance(chunks, bytes | bytearray | memoryview | str):
        raise InvalidInput("chunks must be an iterable of bytes, not one bytes or str object")
    if isinstance(chunks, AsyncIterable):
        async for piece in chunks:
            yield _bytes(piece)
    else:
        for piece in chunks:
            yield _bytes(piece)


def _bytes(piece: object) -> bytes:
    if isinstance(piece, bytes | bytearray | memoryview):
        return bytes(piece)
    raise InvalidInput(f"a chunk must be bytes, not {type(piece).__name__}")
