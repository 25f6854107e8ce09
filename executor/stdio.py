"""The runner's events, read from a container's multiplexed stdout/stderr stream."""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from typing import Any

from executor.errors import SandboxError

log = logging.getLogger(__name__)

MAX_LINE_BYTES = 64 * 1024 * 1024
STDERR_TAIL_BYTES = 16 * 1024
STDOUT, STDERR = 1, 2


class RunnerStream:
    """JSON-line events from the runner's stdout; its stderr is kept as a short tail.

    Without a TTY the engine multiplexes both streams: each payload follows an 8-byte header
    (stream id, three zero bytes, big-endian length).
    """

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader
        self._stdout = bytearray()
        self._stderr: deque[bytes] = deque()
        self._stderr_size = 0
        self._ended = False

    @property
    def ended(self) -> bool:
        return self._ended or self._reader.at_eof()

    @property
    def stderr_tail(self) -> str:
        return b"".join(self._stderr).decode("utf-8", "replace")

    async def receive(self) -> dict[str, Any] | None:
        """The next event, or None once the stream has ended."""
        while True:
            newline = self._stdout.find(b"\n")
            if newline >= 0:
                line = bytes(self._stdout[:newline])
                del self._stdout[: newline + 1]
                try:
                    event = json.loads(line)
                except ValueError:
                    log.warning("the sandbox wrote a line that is not JSON; ignored")
                    continue
                if isinstance(event, dict):
                    return event
                continue
            if len(self._stdout) > MAX_LINE_BYTES:
                raise SandboxError("the sandbox wrote an event larger than 64 MB")
            frame = await self._read_frame()
            if frame is None:
                self._ended = True
                return None
            stream, payload = frame
            if stream == STDERR:
                self._keep_stderr(payload)
            else:
                self._stdout += payload

    async def _read_frame(self) -> tuple[int, bytes] | None:
        try:
            header = await self._reader.readexactly(8)
            payload = await self._reader.readexactly(int.from_bytes(header[4:8], "big"))
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            return None
        return header[0], payload

    def _keep_stderr(self, payload: bytes) -> None:
        self._stderr.append(payload)
        self._stderr_size += len(payload)
        while self._stderr_size > STDERR_TAIL_BYTES and len(self._stderr) > 1:
            self._stderr_size -= len(self._stderr.popleft())
