"""What a sandbox Pod's attach stream may cost the bot: a fixed amount of memory, and a fixed
amount of anything that is not the runner's protocol.

One thread per sandbox reads the websocket. Lines the runner sealed go to the session
through a queue of at most `QUEUE_BYTES`: when the session is not reading (between runs) the
thread stops reading the socket, and the websocket's own flow control holds the sandbox's
output back in the cluster (the container runtime stops copying it, to the container log
too). Everything else (the error stream, lines without the runner's seal) is junk: only a
short tail is kept, and a sandbox that writes more than `JUNK_BUDGET_BYTES` of it is cut
off, so that neither the bot nor the node's disk (every byte the bot reads was also written
to the container log) takes more than that from a flood.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import re
import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from executor.stdio import STDERR, STDOUT

QUEUE_BYTES = 1024 * 1024
"""Sealed output read ahead of the session; the reader stops reading beyond it."""
JUNK_BUDGET_BYTES = 8 * 1024 * 1024
"""Output outside the protocol (error stream, unsealed lines) a sandbox may write in its
life before it is cut off. The runner keeps the kernel's error stream off the channel, so a
sandbox that writes this much is flooding it."""
JUNK_TAIL_BYTES = 16 * 1024
HEADER = re.compile(rb"[0-9a-f]{64} [0-9]{1,20} ")
HEADER_MAX = 64 + 1 + 20 + 1
Frame = tuple[int, bytes] | None


class FrameQueue(asyncio.Queue[Frame]):
    """An event queue that a thread fills and that holds at most `limit` bytes: `put_blocking`
    waits (in the thread) while it is full, until the loop side takes frames or `close()`."""

    def __init__(self, limit: int = QUEUE_BYTES) -> None:
        super().__init__()
        self._limit = limit
        self._held = 0
        self._room = threading.Condition()
        self._closed = False

    @property
    def held(self) -> int:
        return self._held

    def put_blocking(self, loop: asyncio.AbstractEventLoop, frame: Frame) -> bool:
        """Queue a frame from a thread; False once closed (or the loop is gone)."""
        size = len(frame[1]) if frame is not None else 0
        with self._room:
            # A frame larger than the limit still passes once the queue is empty.
            self._room.wait_for(lambda: self._closed or self._held == 0 or self._held < self._limit)
            if self._closed and frame is not None:
                return False
            self._held += size
        try:
            loop.call_soon_threadsafe(self.put_nowait, frame)
        except RuntimeError:  # the loop has closed
            self.close()
            return False
        return True

    def close(self) -> None:
        """Wake and release a thread waiting for room; nothing more is queued."""
        with self._room:
            self._closed = True
            self._room.notify_all()

    def _get(self) -> Frame:
        frame = super()._get()
        if frame is not None:
            with self._room:
                self._held -= len(frame[1])
                self._room.notify_all()
        return frame


class Tail:
    """The last bytes of a stream, kept by one thread and read by another."""

    def __init__(self, limit: int = JUNK_TAIL_BYTES) -> None:
        self._limit = limit
        self._parts: deque[bytes] = deque()
        self._size = 0
        self._lock = threading.Lock()

    def add(self, data: bytes) -> None:
        data = data[-self._limit :]
        with self._lock:
            self._parts.append(data)
            self._size += len(data)
            while self._size > self._limit and len(self._parts) > 1:
                self._size -= len(self._parts.popleft())

    def text(self) -> str:
        with self._lock:
            return b"".join(self._parts)[-self._limit :].decode("utf-8", "replace")


class SealedLines:
    """Splits the runner's output into lines it sealed (passed on; their seal is checked
    again, with the sequence numbers, by the session's RunnerStream) and junk (counted,
    never held): a line without a seal's header is dropped as it arrives; one whose seal
    turns out false at its end is counted (its bytes were already passed on)."""

    def __init__(self, key: bytes) -> None:
        self._key = key
        self._header = bytearray()
        self._mode: str = "header"
        self._mac = b""
        self._hash: Any = None
        self._line = 0
        self.junk = 0

    def feed(self, data: bytes) -> bytes:
        """The bytes of `data` to pass on."""
        passed = bytearray()
        pos, size = 0, len(data)
        while pos < size:
            newline = data.find(b"\n", pos)
            end = size if newline < 0 else newline
            if self._mode == "header":
                take = min(end - pos, HEADER_MAX - len(self._header))
                self._header += data[pos : pos + take]
                pos += take
                self._read_header(passed)
            else:
                chunk = data[pos:end]
                if self._mode == "sealed":
                    self._hash.update(chunk)
                    passed += chunk
                else:
                    self.junk += len(chunk)
                self._line += len(chunk)
                pos = end
            if pos == newline:
                pos += 1
                self._end_line(passed)
        return bytes(passed)

    def _read_header(self, passed: bytearray) -> None:
        first = self._header.find(b" ")
        second = self._header.find(b" ", first + 1) if first >= 0 else -1
        if second < 0:
            if len(self._header) >= HEADER_MAX:
                self._mode, self._line = "junk", len(self._header)
                self.junk += len(self._header)
                self._header.clear()
            return
        header, rest = bytes(self._header[: second + 1]), bytes(self._header[second + 1 :])
        self._header.clear()
        self._line = len(header) + len(rest)
        if not HEADER.fullmatch(header):
            self._mode = "junk"
            self.junk += self._line
            return
        self._mode, self._mac = "sealed", header[:64]
        self._hash = hmac.new(self._key, header[65:], hashlib.sha256)  # "<seq> <payload>"
        self._hash.update(rest)
        passed += header + rest

    def _end_line(self, passed: bytearray) -> None:
        if self._mode == "sealed":
            passed += b"\n"
            if not hmac.compare_digest(self._hash.hexdigest().encode(), self._mac):
                self.junk += self._line + 1
        else:  # junk, or a line that ended within its header
            self.junk += len(self._header) + 1
            self._header.clear()
        self._mode, self._line, self._hash = "header", 0, None


class Pump:
    """The reading side of one attach stream (run in its own thread)."""

    def __init__(
        self,
        frames: Callable[[], Iterator[tuple[int, bytes]]],
        key: bytes,
        queue: FrameQueue,
        loop: asyncio.AbstractEventLoop,
        budget: int = JUNK_BUDGET_BYTES,
    ) -> None:
        self._frames = frames
        self._queue = queue
        self._loop = loop
        self._budget = budget
        self._lines = SealedLines(key)
        self._stderr = 0
        self.tail = Tail()
        self.flooded = False

    @property
    def junk(self) -> int:
        return self._stderr + self._lines.junk

    def run(self) -> None:
        try:
            for channel, data in self._frames():
                if channel == STDERR:
                    self._stderr += len(data)
                    self.tail.add(data)
                elif channel == STDOUT:
                    before = self._lines.junk
                    passed = self._lines.feed(data)
                    if self._lines.junk > before:
                        self.tail.add(data[-256:])
                    if passed and not self._queue.put_blocking(self._loop, (STDOUT, passed)):
                        return
                if self.junk > self._budget:
                    self.flooded = True
                    return
        finally:
            with contextlib.suppress(RuntimeError):
                self._queue.close()
                self._loop.call_soon_threadsafe(self._queue.put_nowait, None)
