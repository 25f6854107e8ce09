"""The runner's events, read from a container's multiplexed stdout/stderr stream, and its
requests, sealed for its stdin.

The lines are the runner protocol's (executor/wire/: the hello with the key, then sealed
lines both ways); this stream keeps the numbering of one attachment and drops every line
the runner did not seal. It speaks JSON objects; `RunnerClient` turns them into the
protocol's typed messages.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

from executor import wire
from executor.errors import ChannelDamaged, SandboxError
from executor.wire import seal, unseal

log = logging.getLogger(__name__)

MAX_LINE_BYTES = 64 * 1024 * 1024
STDERR_TAIL_BYTES = 16 * 1024
STDOUT, STDERR = 1, 2


class RunnerStream:
    """JSON-line events from the runner's stdout; its stderr is kept as a short tail.

    Without a TTY the engine multiplexes both streams: each payload follows an 8-byte header
    (stream id, three zero bytes, big-endian length).
    """

    def __init__(
        self,
        reader: asyncio.StreamReader | None = None,
        frames: asyncio.Queue[tuple[int, bytes] | None] | None = None,
        *,
        key: bytes,
    ) -> None:
        """Frames come from `reader` (an engine's multiplexed stream) or, already split by
        stream, from `frames` (None there ends the stream). `key`: the key the host gives
        the runner in its hello."""
        self._reader = reader
        self._frames = frames
        self._stdout = bytearray()
        self._stderr: deque[bytes] = deque()
        self._stderr_size = 0
        self._ended = False
        self._key = key
        self._received = 0
        self._sent = 0
        self._resuming: str | None = None
        self.refused = 0
        """Lines that were not sealed by the runner (forged, replayed or damaged)."""
        self._replayed: deque[dict[str, Any]] = deque()

    @property
    def key(self) -> bytes:
        """The key lines are sealed with now."""
        return self._key

    @property
    def ended(self) -> bool:
        return self._ended or (self._reader is not None and self._reader.at_eof())

    @property
    def stderr_tail(self) -> str:
        return b"".join(self._stderr).decode("utf-8", "replace")

    async def receive(self) -> dict[str, Any] | None:
        """The next event, or None once the stream has ended."""
        if self._replayed:
            return self._replayed.popleft()
        while True:
            newline = self._stdout.find(b"\n")
            if newline >= 0:
                line = bytes(self._stdout[:newline])
                del self._stdout[: newline + 1]
                event = self._event(line)
                if event is not None:
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

    def use_key(self, key: bytes) -> None:
        """Seal and open with `key` (a restored clone's, which it had from its template)."""
        self._key = key

    def replay(self, event: dict[str, Any]) -> None:
        """An event this side knows the runner said before (a clone's template did), which
        `receive` gives first."""
        self._replayed.append(event)

    def hello_line(self) -> bytes:
        """The first line the runner reads (CELLMATE_RUNNER_AWAIT_HELLO=1): its key."""
        return wire.hello_line(self._key)

    def request_line(self, request: Mapping[str, Any]) -> bytes:
        """A request as the runner accepts it: sealed. A `resume` starts a new numbering
        (see `resume_line`)."""
        if request.get("op") == wire.Resume.op:
            return self.resume_line(str(request.get("nonce", "")))
        self._sent += 1
        line = seal(self._key, self._sent, wire.dumps(request))
        if request.get("op") == wire.Rekey.op:
            # The last line under the old key: from here on both sides seal with the new one,
            # numbered afresh, and whatever the old key sealed no longer counts.
            self._key = bytes.fromhex(str(request["key"]))
            self._sent = self._received = 0
        return line

    def resume_line(self, nonce: str) -> bytes:
        """A `resume` request from a host that attaches again (see executor/wire/): its
        numbers start above any an earlier host used, and only the answer to it opens the
        runner's."""
        self._sent = time.time_ns()
        self._resuming = nonce
        return seal(self._key, self._sent, wire.dumps(wire.encode(wire.Resume(nonce=nonce))))

    def _event(self, line: bytes) -> dict[str, Any] | None:
        if self._resuming is not None:
            return self._resumed(self._key, line, self._resuming)
        opened = unseal(self._key, line, self._received)
        if opened is None:
            self.refused += 1
            if self.refused == 1:
                log.warning("the sandbox wrote a line the runner did not seal; ignored")
            return None
        seq, line = opened
        lost = seq - self._received - 1
        # The runner numbers its lines one by one; a number skipped is a line that arrived
        # broken (code in the sandbox writing into the same pipe cuts it). The first line of
        # a numbering may start anywhere (a clone carries on from its template's).
        if self._received and lost > 0:
            self._received = seq
            raise ChannelDamaged(
                f"{lost} of the runner's messages arrived broken: code in the sandbox "
                "wrote into the channel the runner answers on"
            )
        self._received = seq
        event = wire.loads(line)
        if event is None:
            log.warning("the sandbox wrote a line that is not a JSON object; ignored")
        return event

    def _resumed(self, key: bytes, line: bytes, nonce: str) -> dict[str, Any] | None:
        opened = unseal(key, line, 0)
        if opened is None:
            return None  # sealed before this host attached, or not sealed at all
        seq, payload = opened
        event = wire.loads(payload)
        answer = wire.decode_event(event) if event is not None else None
        if not isinstance(answer, wire.Resumed) or answer.nonce != nonce:
            return None
        self._received, self._resuming = seq, None
        return event

    async def _read_frame(self) -> tuple[int, bytes] | None:
        if self._frames is not None:
            return await self._frames.get()
        assert self._reader is not None
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
