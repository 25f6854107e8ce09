"""What a Pod's attach stream may cost the bot: sealed lines pass, junk is counted and
dropped, the queue to the session holds a fixed number of bytes and makes the reader wait."""

from __future__ import annotations

import asyncio
import os
import random
import threading
from collections.abc import Iterator

from executor.kubernetes_stream import FrameQueue, Pump, SealedLines
from executor.stdio import STDERR, STDOUT, RunnerStream, seal

KEY = os.urandom(32)


def sealed(*payloads: bytes) -> bytes:
    return b"".join(seal(KEY, seq, payload) for seq, payload in enumerate(payloads, 1))


def fed_in_pieces(data: bytes, sizes: list[int]) -> tuple[bytes, int]:
    lines = SealedLines(KEY)
    passed, position = bytearray(), 0
    for size in sizes:
        passed += lines.feed(data[position : position + size])
        position += size
    passed += lines.feed(data[position:])
    return bytes(passed), lines.junk


def test_sealed_lines_pass_whole_however_the_stream_is_cut() -> None:
    data = sealed(b'{"type": "ready"}', b'{"type": "output", "x": "' + b"y" * 5000 + b'"}')
    chooser = random.Random(7)  # noqa: S311 - cut points, not secrets
    for _ in range(200):
        sizes = [chooser.randint(1, 120) for _ in range(chooser.randint(0, 80))]
        assert fed_in_pieces(data, sizes) == (data, 0)


def test_junk_is_dropped_and_counted_in_every_shape() -> None:
    good = sealed(b'{"type": "ready"}')
    forged = seal(os.urandom(32), 2, b'{"type": "done"}')
    for junk, passes in (
        (b"plain text from a thread\n", False),
        (b"x" * 100_000 + b"\n", False),  # one long line without a header
        (b"\n\n\n", False),
        (b"0" * 64 + b" 12x {}\n", False),  # a header that is almost right
        (b"ab cd\n", False),
        (forged, True),  # a seal made with another key: passed on, refused later, counted
    ):
        for sizes in ([], [1] * 200, [63, 1, 1, 2, 500]):
            passed, counted = fed_in_pieces(good + junk + good, sizes)
            assert counted == len(junk), junk[:40]
            assert passed == (good + junk + good if passes else good + good), junk[:40]


async def test_the_queue_holds_a_fixed_number_of_bytes_and_the_reader_waits() -> None:
    queue = FrameQueue(limit=64 * 1024)
    loop = asyncio.get_running_loop()
    put = 0

    def reader() -> None:
        nonlocal put
        for _ in range(1000):
            if not queue.put_blocking(loop, (STDOUT, b"x" * 16 * 1024)):
                return
            put += 1

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    async with asyncio.timeout(10):
        while put < 4:  # noqa: ASYNC110 - the thread has no event to wait on
            await asyncio.sleep(0.01)
    await asyncio.sleep(0.2)
    assert put == 4  # 64 KiB held: the reader stops until the session takes frames
    assert queue.held <= 64 * 1024
    for _ in range(10):
        await queue.get()
    async with asyncio.timeout(10):
        while put < 14:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    queue.close()  # a waiting reader is let go, e.g. when the sandbox is removed
    await asyncio.to_thread(thread.join, 10)
    assert not thread.is_alive()
    assert put < 1000


async def test_a_flood_outside_the_protocol_cuts_the_sandbox_off_and_keeps_a_tail() -> None:
    def frames() -> Iterator[tuple[int, bytes]]:
        yield STDOUT, sealed(b'{"type": "ready"}')
        while True:  # never ends by itself
            yield STDERR, b"e" * 60_000 + b"the end\n"
            yield STDOUT, b"garbage line\n" * 1000

    queue = FrameQueue()
    pump = Pump(frames, KEY, queue, asyncio.get_running_loop(), budget=4 * 1024 * 1024)
    await asyncio.to_thread(pump.run)
    assert pump.flooded
    assert 4 * 1024 * 1024 < pump.junk < 5 * 1024 * 1024
    assert "the end" in pump.tail.text() or "garbage line" in pump.tail.text()
    assert len(pump.tail.text()) <= 16 * 1024
    events = RunnerStream(frames=queue, key=KEY)
    assert await events.receive() == {"type": "ready"}
    assert await events.receive() is None
