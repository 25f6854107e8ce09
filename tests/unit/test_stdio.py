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


def broken(line: bytes, junk: bytes, at: int) -> bytes:
    """`line` with `junk` written into the middle of it, as a second writer on the pipe does."""
    return line[:at] + junk + line[at:]


@pytest.mark.parametrize(
    "damage",
    [
        lambda line: broken(line, b"garbage\n", 30),  # cut in two by a line of junk
        lambda line: broken(line, b"{" * 200, 90),  # junk inside its payload
        lambda line: broken(line, b"0" * 64 + b" 2 ", 0),  # a forged header before it
        lambda line: line[:40] + b"\n",  # its end lost
        lambda line: b"",  # gone altogether
    ],
)
async def test_a_message_broken_on_the_way_is_said_not_skipped(damage: Any) -> None:
    events = stream_of(
        frame(1, sealed(1, {"type": "ready"})),
        frame(1, damage(sealed(2, {"type": "output", "text": "2"}))),
        frame(1, sealed(3, {"type": "done"}) + sealed(4, {"type": "x"})),
    )
    assert await events.receive() == {"type": "ready"}
    with pytest.raises(SandboxError, match="1 of the runner's messages arrived broken"):
        await events.receive()
    assert await events.receive() == {"type": "x"}


async def test_junk_between_whole_messages_loses_nothing() -> None:
    events = stream_of(
        frame(1, sealed(1, {"type": "ready"}) + b"garbage\n" * 3),
        frame(2, b"stderr noise\n"),
        frame(1, sealed(1, {"type": "replayed"}) + sealed(2, {"type": "done"})),
    )
    assert await events.receive() == {"type": "ready"}
    assert await events.receive() == {"type": "done"}
    assert events.refused == 4


async def test_the_first_message_of_a_numbering_may_start_anywhere() -> None:
    # A clone restored from a template carries on with its template's numbers.
    events = stream_of(frame(1, sealed(41, {"type": "a"}) + sealed(42, {"type": "b"})))
    assert await events.receive() == {"type": "a"}
    assert await events.receive() == {"type": "b"}
