"""Streamed reads and writes through `Session`, on the fake backend: what a caller sees
when the file is too large, the caller's chunks are not bytes or fail, the file changes
while it is read, or no session has started; and that nothing partial stays."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from executor import Executor, InvalidInput, PoolSettings, SandboxError, SandboxLimits
from executor.fake_backend import FakeBackend

MB = 1024 * 1024


@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend({})


@pytest.fixture
async def executor(backend: FakeBackend) -> AsyncIterator[Executor]:
    limits = SandboxLimits(file_size_mb=3, data_mb=8)
    async with Executor("fake", limits=limits, backend=backend, pool=PoolSettings(size=0)) as ex:
        yield ex
    assert not backend.live, "a fake sandbox was left behind"


def files_of(backend: FakeBackend) -> dict[str, bytes]:
    (sandbox,) = backend.live
    return dict(sandbox.files)


async def test_a_file_larger_than_the_limit_is_refused_and_nothing_stays(
    executor: Executor, backend: FakeBackend
) -> None:
    session = executor.session("k")
    await session.put_files({"keep.txt": b"k"})
    with pytest.raises(InvalidInput, match=r"larger than the sandbox allows \(3 MB\)"):
        await session.write_file_stream("big.bin", [b"x" * MB] * 4)
    assert files_of(backend) == {"keep.txt": b"k"}
    assert await session.write_file_stream("ok.bin", [b"x" * MB] * 3) == 3 * MB


async def test_a_full_disk_is_said_and_nothing_stays(
    executor: Executor, backend: FakeBackend
) -> None:
    session = executor.session("k")
    await session.put_files({"fill.bin": b"f" * 6 * MB})
    with pytest.raises(InvalidInput, match=r"/mnt/data is full.*nothing was kept"):
        await session.write_file_stream("more.bin", [b"x" * MB] * 3)
    assert sorted(files_of(backend)) == ["fill.bin"]


@pytest.mark.parametrize("chunks", [b"bytes itself", "text", [b"a", "b"], [b"a", 1], [None]])
async def test_chunks_that_are_not_bytes_are_refused(executor: Executor, chunks: object) -> None:
    session = executor.session("k")
    with pytest.raises(InvalidInput, match="bytes"):
        await session.write_file_stream("x.bin", chunks)  # type: ignore[arg-type]
    assert await session.info("x.bin") is None


async def test_a_failing_source_leaves_nothing(executor: Executor, backend: FakeBackend) -> None:
    session = executor.session("k")

    async def failing() -> AsyncIterator[bytes]:
        yield b"x" * 2 * MB
        raise OSError("the source broke")

    with pytest.raises(OSError, match="source broke"):
        await session.write_file_stream("x.bin", failing())
    assert files_of(backend) == {}
    (sandbox,) = backend.live
    assert sandbox.tree.uploads == {}


async def test_reads_check_sizes_paths_and_that_the_file_holds_still(
    executor: Executor, backend: FakeBackend
) -> None:
    session = executor.session("k")
    with pytest.raises(InvalidInput, match="has not started"):
        async for _ in session.read_file_stream("a.bin"):
            pass
    await session.put_files({"a.bin": b"a" * 1000})
    for size in (0, -1, 4 * MB + 1):
        with pytest.raises(InvalidInput, match="chunk_size"):
            async for _ in session.read_file_stream("a.bin", chunk_size=size):
                pass
    for path in ("../a.bin", "/mnt/data/a.bin", "a\x00", "", "x/../../a.bin"):
        with pytest.raises(InvalidInput, match="relative to /mnt/data"):
            async for _ in session.read_file_stream(path):
                pass
    assert [len(c) async for c in session.read_file_stream("a.bin", 300)] == [300, 300, 300, 100]
    reading = session.read_file_stream("a.bin", 300)
    assert await anext(reading) == b"a" * 300
    (sandbox,) = backend.live
    sandbox.files["a.bin"] = b"b" * 1000  # changed between two chunks
    with pytest.raises(SandboxError, match="changed while it was read"):
        await anext(reading)


async def test_depth_must_be_at_least_one(executor: Executor) -> None:
    session = executor.session("k")
    await session.put_files({"a/b/c.txt": b"c"})
    assert [f.path for f in await session.files(depth=1)] == ["a"]
    assert [f.path for f in await session.files(depth=2)] == ["a", "a/b"]
    assert [f.path for f in await session.files(recursive=False)] == ["a"]
    assert [f.path for f in await session.files()] == ["a", "a/b", "a/b/c.txt"]
    for depth in (0, -1):
        with pytest.raises(InvalidInput, match="depth"):
            await session.files(depth=depth)
