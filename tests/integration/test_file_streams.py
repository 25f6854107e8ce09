"""The file API against a real sandbox (runc and gVisor): listings to a depth with
permission bits, owners and a link's target (never followed); a 64 MB file, larger than
one protocol line, written and read back in chunks; reads and writes that refuse links,
FIFOs, folders and paths out of /mnt/data in each form; and writes past the sandbox's disk
that fail saying so and leave nothing behind."""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator

import pytest

from executor import Executor, InvalidInput, SandboxLimits, Status, default_tag
from executor.session_streams import CHUNK_BYTES
from executor.stdio import MAX_LINE_BYTES
from tests.integration.conftest import NO_POOL
from tests.support.sandboxes import TEST_INSTANCE

pytestmark = pytest.mark.docker

MB = 1024 * 1024
MADE = """
import os
os.makedirs('in/deep/er', exist_ok=True)
for name in ('top.txt', 'in/a.csv', 'in/deep/b.txt', 'in/deep/er/c'):
    open(name, 'w').write('x')
os.chmod('in/a.csv', 0o640)
os.symlink('/etc/passwd', 'passwd')
os.symlink('/etc', 'etc')
os.symlink('in/a.csv', 'in/near')
os.mkfifo('pipe')
"""


async def test_listings_have_depth_mode_owner_and_link_targets(executor: Executor) -> None:
    session = executor.session("listing")
    made = await session.run(MADE)
    assert made.status is Status.OK, made.error
    top = {f.path: f for f in await session.files(depth=1)}
    assert sorted(top) == ["etc", "in", "passwd", "pipe", "top.txt"]
    assert [f.path for f in await session.files(recursive=False)] == sorted(top)
    two = [f.path for f in await session.files(depth=2)]
    assert two == [*sorted(top), "in/a.csv", "in/deep", "in/near"]
    every = {f.path for f in await session.files()}
    assert every == {*two, "in/deep/b.txt", "in/deep/er", "in/deep/er/c"}
    assert [f.path for f in await session.files("in/deep", depth=1)] == [
        "in/deep/b.txt",
        "in/deep/er",
    ]
    link = top["passwd"]
    assert (link.type, link.symlink_target, link.size) == ("link", "/etc/passwd", 0)
    assert (top["etc"].type, top["etc"].symlink_target) == ("link", "/etc")
    near = await session.info("in/near")
    assert near is not None
    assert (near.type, near.symlink_target) == ("link", "in/a.csv")
    csv = await session.info("in/a.csv")
    assert csv is not None
    assert (csv.mode, csv.permissions) == (0o640, "rw-r-----")
    assert (csv.owner, csv.group, csv.symlink_target) == ("sandbox", "sandbox", None)
    assert top["in"].type == "dir"
    assert top["in"].permissions.startswith("rwx")
    with pytest.raises(InvalidInput, match="depth"):
        await session.files(depth=0)
    # A link's folder is never listed through: the link is an entry, /etc is not walked.
    assert not any(f.path.startswith("etc/") for f in await session.files())
    for path in ("etc", "etc/", "./etc", "in/near"):
        with pytest.raises(InvalidInput, match="is a link"):
            await session.files(path)
    with pytest.raises(InvalidInput, match="goes through a link"):
        await session.files("etc/ssl")


async def test_a_64_mb_file_is_written_and_read_back_in_chunks(executor: Executor) -> None:
    session = executor.session("big")
    size = 64 * MB + 4321
    assert size > MAX_LINE_BYTES  # more than one protocol line could carry
    seed = os.urandom(MB)
    sent = hashlib.sha256()

    async def chunks() -> AsyncIterator[bytes]:
        left = size
        while left:
            piece = seed[: min(left, 700_000)]  # sizes the sender does not control
            sent.update(piece)
            left -= len(piece)
            yield piece

    assert await session.write_file_stream("out/big.bin", chunks()) == size
    got, largest = hashlib.sha256(), 0
    async for chunk in session.read_file_stream("out/big.bin", chunk_size=4 * MB):
        got.update(chunk)
        largest = max(largest, len(chunk))
    assert got.hexdigest() == sent.hexdigest()
    assert largest == 4 * MB
    seen = await session.run(
        "import hashlib\nprint(hashlib.sha256(open('out/big.bin','rb').read()).hexdigest())"
    )
    assert seen.stdout.strip() == sent.hexdigest()
    assert [f.path for f in await session.files("out")] == ["out/big.bin"]  # no partial file
    assert await session.write_file_stream("out/big.bin", [b"small ", b"now"]) == 9
    assert b"".join([c async for c in session.read_file_stream("out/big.bin")]) == b"small now"
    assert CHUNK_BYTES < MAX_LINE_BYTES


READ_REFUSALS = [
    ("passwd", "is a link"),
    ("in/near", "is a link"),
    ("etc/passwd", "goes through a link"),
    ("etc/hostname", "goes through a link"),
    ("pipe", "is a FIFO"),
    ("in", "is a folder"),
    ("top.txt/x", "goes through a file"),
    ("missing.txt", "FileNotFoundError"),
    ("../etc/passwd", "relative to /mnt/data"),
    ("in/../../etc/passwd", "relative to /mnt/data"),
    ("..", "relative to /mnt/data"),
    ("/etc/passwd", "relative to /mnt/data"),
    ("/mnt/data/top.txt", "relative to /mnt/data"),
    ("top.txt\x00", "relative to /mnt/data"),
    ("", "relative to /mnt/data"),
]


async def test_streamed_reads_refuse_links_fifos_and_paths_out(executor: Executor) -> None:
    session = executor.session("refusals")
    made = await session.run(MADE)
    assert made.status is Status.OK, made.error
    for path, said in READ_REFUSALS:
        with pytest.raises(InvalidInput, match=said):
            async for _ in session.read_file_stream(path):
                pass
    # The FIFO was refused without opening it for long: nothing waits on it, and the
    # runner still answers.
    assert b"".join([c async for c in session.read_file_stream("top.txt")]) == b"x"


async def test_streamed_writes_refuse_links_fifos_and_paths_out(executor: Executor) -> None:
    session = executor.session("write-refusals")
    made = await session.run(MADE)
    assert made.status is Status.OK, made.error
    for path, said in [
        ("passwd", "is a link"),
        ("etc/evil", "goes through a link"),
        ("etc/deep/evil", "goes through a link"),
        ("pipe", "is a FIFO"),
        ("in", "is a folder"),
        ("top.txt/x", "goes through a file"),
        ("../evil", "relative to /mnt/data"),
        ("/tmp/evil", "relative to /mnt/data"),
        ("in/../../evil", "relative to /mnt/data"),
        ("evil\x00", "relative to /mnt/data"),
    ]:
        with pytest.raises(InvalidInput, match=said):
            await session.write_file_stream(path, [b"evil"])
    after = await session.run(
        "import os\nprint(os.readlink('passwd'), open('/etc/passwd').read().count('evil'),"
        " sorted(n for n in os.listdir('.') if n.startswith('.')), os.path.exists('/tmp/evil'))"
    )
    assert after.stdout == "/etc/passwd 0 [] False\n"


async def test_a_write_past_the_disk_fails_and_leaves_nothing(runtime: str) -> None:
    limits = SandboxLimits(runtime=runtime, data_mb=24, file_size_mb=20)  # type: ignore[arg-type]
    async with Executor(default_tag(), limits=limits, instance=TEST_INSTANCE, pool=NO_POOL) as ex:
        session = ex.session("full")
        with pytest.raises(InvalidInput, match=r"larger than the sandbox allows \(20 MB\)"):
            await session.write_file_stream("huge.bin", [b"y" * MB] * 21)
        filled = await session.run("open('fill.bin', 'wb').write(b'x' * 16 * 1024 * 1024)")
        assert filled.status is Status.OK, filled.error
        with pytest.raises(InvalidInput, match=r"/mnt/data is full.*nothing was kept"):
            await session.write_file_stream("big.bin", [b"y" * MB] * 12)

        def broken() -> AsyncIterator[bytes]:
            async def gen() -> AsyncIterator[bytes]:
                yield b"z" * 3 * MB
                raise RuntimeError("the caller's source failed")

            return gen()

        with pytest.raises(RuntimeError, match="source failed"):
            await session.write_file_stream("broken.bin", broken())
        left = await session.run("import os\nprint(sorted(os.listdir('.')))")
        assert left.stdout == "['fill.bin']\n"
