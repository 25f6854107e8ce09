"""The file API's contract on every backend (the fake, Docker under runc and gVisor,
Kubernetes): listings to a depth with permission bits and owners, files written and read
in chunks (wire `WriteChunk`, `ReadChunk`) with nothing partial left behind, and what the
runner refuses or ignores."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterator

from executor import Executor, PoolSettings, SandboxLimits, wire
from executor.archive import build_input_tar
from executor.protocol import Sandbox, SandboxBackend
from executor.runner_client import RunnerClient
from tests.support.runner_events import notices_and_outputs

TREE = {"top.txt": b"top", "in/a.csv": b"a,b\n", "in/deep/b.txt": b"bb", "in/deep/er/c": b"c"}
CHUNK = 1024 * 1024


async def put_tree(sandbox: Sandbox, limits: SandboxLimits) -> None:
    tar = build_input_tar(TREE, 10, 10**6, limits.uid, limits.gid, folders=True)
    await sandbox.put_files(tar)


async def listed(client: RunnerClient, path: str = "", depth: int = 0) -> list[wire.Entry]:
    answer = await client.fs("list", path, depth=depth)
    assert answer is not None
    assert answer.error is None
    return list(answer.entries or ())


async def test_listings_go_to_a_depth_with_mode_and_owner(
    sandbox: Sandbox, limits: SandboxLimits
) -> None:
    await put_tree(sandbox, limits)
    client = RunnerClient(sandbox)
    assert [e.path for e in await listed(client, depth=1)] == ["in", "top.txt"]
    assert [e.path for e in await listed(client, depth=2)] == [
        "in",
        "top.txt",
        "in/a.csv",
        "in/deep",
    ]
    assert [e.path for e in await listed(client, "in/deep", depth=1)] == [
        "in/deep/b.txt",
        "in/deep/er",
    ]
    every = await listed(client)
    assert {e.path for e in every} == {"in", "in/deep", "in/deep/er", *TREE}
    for entry in every:
        assert entry.owner == entry.group == "sandbox"  # uid 61000 has a name in the image
        assert entry.mode & 0o700 == (0o700 if entry.type == "dir" else 0o600)
        assert entry.target is None
    info = await client.fs("info", "in/a.csv")
    assert info is not None
    assert info.entry is not None
    assert (info.entry.size, info.entry.owner) == (4, "sandbox")


async def write(client: RunnerClient, upload: str, path: str, data: bytes) -> wire.Written:
    """Write `data` in chunks, the last one putting it in place."""
    offset = 0
    while True:
        piece = data[offset : offset + CHUNK]
        last = offset + len(piece) >= len(data)
        answer = await client.write_chunk(upload, path, offset, piece, last=last)
        assert answer is not None
        if answer.error or last:
            return answer
        offset = answer.written


async def read(client: RunnerClient, path: str, size: int = CHUNK) -> tuple[bytes, str]:
    """A file's bytes read in chunks, and its version (the same in each)."""
    found, versions = bytearray(), set()
    while True:
        chunk = await client.read_chunk(path, len(found), size)
        assert chunk is not None
        assert chunk.error is None, chunk.error
        found += chunk.data
        versions.add(chunk.version)
        if chunk.eof:
            assert len(versions) == 1
            return bytes(found), versions.pop()


async def test_a_file_written_in_chunks_reads_back_the_same(sandbox: Sandbox) -> None:
    client = RunnerClient(sandbox)
    data = os.urandom(5 * CHUNK + 12345)
    done = await write(client, "up1", "out/new/big.bin", data)
    assert (done.done, done.written, done.error) == (True, len(data), None)
    back, _ = await read(client, "out/new/big.bin", size=777_777)
    assert hashlib.sha256(back).hexdigest() == hashlib.sha256(data).hexdigest()
    names = [e.path for e in await listed(client, "out/new")]
    assert names == ["out/new/big.bin"]  # no partial file is left beside it
    again = await write(client, "up2", "out/new/big.bin", b"short")
    assert again.done
    assert (await read(client, "out/new/big.bin"))[0] == b"short"
    empty = await write(client, "up3", "empty.txt", b"")
    assert (empty.done, empty.written) == (True, 0)
    assert (await read(client, "empty.txt"))[0] == b""


async def test_an_upload_that_fails_or_is_aborted_leaves_nothing(sandbox: Sandbox) -> None:
    client = RunnerClient(sandbox)
    first = await client.write_chunk("up1", "half.bin", 0, b"x" * 1000)
    assert first is not None
    assert (first.written, first.done) == (1000, False)
    skipped = await client.write_chunk("up1", "half.bin", 5000, b"y")
    assert skipped is not None
    assert "1000 bytes are written" in (skipped.error or "")
    late = await client.write_chunk("up1", "half.bin", 1000, b"y", last=True)
    assert late is not None
    assert "no such upload" in (late.error or "")
    started = await client.write_chunk("up2", "gone.bin", 0, b"z" * 10)
    assert started is not None
    assert started.error is None
    aborted = await client.write_chunk("up2", "gone.bin", 0, b"", abort=True)
    assert aborted is not None
    assert aborted.done
    assert await listed(client) == []


async def test_reads_and_writes_refuse_what_is_no_regular_file(
    sandbox: Sandbox, limits: SandboxLimits
) -> None:
    await put_tree(sandbox, limits)
    client = RunnerClient(sandbox)
    for path, said in [
        ("missing.txt", "FileNotFoundError"),
        ("in", "is a folder"),
        ("in/deep", "is a folder"),
        ("top.txt/x", ""),
    ]:
        chunk = await client.read_chunk(path, 0, 10)
        assert chunk is not None
        assert chunk.data == b""
        assert said in (chunk.error or "missing error")
    for path, said in [("in", "is a folder"), ("top.txt/x", "goes through a file")]:
        written = await client.write_chunk("w", path, 0, b"x", last=True)
        assert written is not None
        assert said in (written.error or "missing error")
    assert {e.path for e in await listed(client)} == {"in", "in/deep", "in/deep/er", *TREE}


async def test_chunks_whose_path_leaves_mnt_data_are_ignored_and_said(sandbox: Sandbox) -> None:
    bad_paths = ["../etc/passwd", "/etc/passwd", "a/../../b", "in\x00x", "", "..", "/"]
    for path in bad_paths:
        await sandbox.send({"op": "read_chunk", "id": "r", "path": path, "size": 10})
        await sandbox.send({"op": "write_chunk", "id": "w", "upload": "u", "path": path})
    await sandbox.send({"op": "read_chunk", "id": "r", "path": "a", "size": 10**9})
    await sandbox.send({"op": "write_chunk", "id": "w", "upload": "u", "path": "a", "data": "!"})
    client = RunnerClient(sandbox)
    run_id = await client.run(
        ["print(6 * 7)"], output_limit=10**6, rich_limit=10**7, rich_count_limit=100
    )
    notices, _ = await notices_and_outputs(client, run_id)
    assert notices == ["malformed request ignored"] * (2 * len(bad_paths) + 2)


async def test_a_session_streams_a_file_and_lists_to_a_depth(
    backend: SandboxBackend, limits: SandboxLimits
) -> None:
    """The same through `Session`, on each backend (the fake's too)."""
    async with Executor(
        "contract", limits=limits, backend=backend, pool=PoolSettings(size=0, template=False)
    ) as executor:
        session = executor.session("streams")
        data = os.urandom(3 * CHUNK + 1)

        async def chunks() -> AsyncIterator[bytes]:
            for start in range(0, len(data), 100_000):
                yield data[start : start + 100_000]
                await asyncio.sleep(0)

        assert await session.write_file_stream("in/big.bin", chunks()) == len(data)
        back = b"".join([c async for c in session.read_file_stream("in/big.bin", 500_000)])
        assert back == data
        assert [f.path for f in await session.files(depth=1)] == ["in"]
        found = await session.files("in", depth=1)
        assert [(f.path, f.size, f.owner, f.permissions[:2]) for f in found] == [
            ("in/big.bin", len(data), "sandbox", "rw")
        ]
