from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import pytest

from executor.errors import SandboxError
from executor.stdio import RunnerStream, seal

KEY = os.urandom(32)


def frame(stream: int, payload: bytes) -> bytes:
    return bytes([stream, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload


def stream_of(*chunks: bytes) -> RunnerStream:
    reader = asyncio.StreamReader()
    for chunk in chunks:
        reader.feed_data(chunk)
    reader.feed_eof()
    return RunnerStream(reader, key=KEY)


def sealed(seq: int, event: Any) -> bytes:
    return seal(KEY, seq, json.dumps(event).encode())


async def test_events_split_across_frames_and_interleaved_with_stderr() -> None:
    line = sealed(1, {"type": "ready", "python": "3.11.2"})
    events = stream_of(
        frame(1, line[:7]),
        frame(2, b"a warning\n"),
        frame(1, line[7:] + sealed(2, {"type": "done"})),
    )
    assert await events.receive() == {"type": "ready", "python": "3.11.2"}
    assert await events.receive() == {"type": "done"}
    assert await events.receive() is None
    assert events.stderr_tail == "a warning\n"


async def test_noise_that_is_not_an_event_is_skipped() -> None:
    events = stream_of(
        frame(1, b"not json\n" + seal(KEY, 1, b"not json") + sealed(2, [1, 2])),
        frame(1, seal(KEY, 3, b"\xff\xfe") + sealed(4, {"type": "x"})),
    )
    assert await events.receive() == {"type": "x"}


async def test_truncated_stream_ends_cleanly() -> None:
    events = stream_of(frame(1, sealed(1, {"type": "x"}))[:-3])
    assert await events.receive() is None


async def test_an_endless_line_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("executor.stdio.MAX_LINE_BYTES", 10)
    events = stream_of(frame(1, b"x" * 11), frame(1, b"y"))
    with pytest.raises(SandboxError, match="larger than"):
        await events.receive()
