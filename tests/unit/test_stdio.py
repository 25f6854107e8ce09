from __future__ import annotations

import asyncio
import json

import pytest

from executor.errors import SandboxError
from executor.stdio import RunnerStream


def frame(stream: int, payload: bytes) -> bytes:
    return bytes([stream, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload


def stream_of(*chunks: bytes) -> RunnerStream:
    reader = asyncio.StreamReader()
    for chunk in chunks:
        reader.feed_data(chunk)
    reader.feed_eof()
    return RunnerStream(reader)


async def test_events_split_across_frames_and_interleaved_with_stderr() -> None:
    line = json.dumps({"type": "ready", "python": "3.11.2"}).encode() + b"\n"
    events = stream_of(
        frame(1, line[:7]),
        frame(2, b"a warning\n"),
        frame(1, line[7:] + b'{"type": "done"}\n'),
    )
    assert await events.receive() == {"type": "ready", "python": "3.11.2"}
    assert await events.receive() == {"type": "done"}
    assert await events.receive() is None
    assert events.stderr_tail == "a warning\n"


async def test_noise_that_is_not_an_event_is_skipped() -> None:
    events = stream_of(frame(1, b'not json\n[1, 2]\n\xff\xfe\n{"type": "x"}\n'))
    assert await events.receive() == {"type": "x"}


async def test_truncated_stream_ends_cleanly() -> None:
    events = stream_of(frame(1, b'{"type": "x"}\n')[:-3])
    assert await events.receive() is None


async def test_an_endless_line_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("executor.stdio.MAX_LINE_BYTES", 10)
    events = stream_of(frame(1, b"x" * 11), frame(1, b"y"))
    with pytest.raises(SandboxError, match="larger than"):
        await events.receive()
