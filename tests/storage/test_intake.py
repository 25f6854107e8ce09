"""Attachments in: caps, names, and downloads over real HTTP on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from storage.intake import IncomingFile, IntakeLimits, http_fetcher, receive
from tests.storage.azurite import free_port

LIMITS = IntakeLimits(max_bytes=100, max_count=3, max_total_bytes=150)


@pytest.fixture
async def file_server() -> AsyncIterator[str]:
    async def serve(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != "Bearer xoxb-test":
            return web.Response(status=403)
        size = int(request.match_info["size"])
        return web.Response(body=b"x" * size)

    app = web.Application()
    app.router.add_get("/files/{size}", serve)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield f"http://127.0.0.1:{port}/files"
    await runner.cleanup()


async def test_files_are_accepted_renamed_or_refused_with_reasons() -> None:
    intake = await receive(
        [
            IncomingFile("sales.csv", 8, b"a,b\n1,2\n"),
            IncomingFile("../../etc/passwd", 4, b"root"),
            IncomingFile("huge.bin", 10_000),
            IncomingFile("sales.csv", 3, b"dup"),
            IncomingFile("fourth.txt", 1, b"4"),
        ],
        limits=LIMITS,
    )
    assert intake.files == {"sales.csv": b"a,b\n1,2\n", "passwd": b"root"}
    assert intake.renamed == {"../../etc/passwd": "passwd"}
    assert [(r.name, r.reason) for r in intake.refused] == [
        ("huge.bin", "larger than the 0.0001 MB limit"),
        ("sales.csv", "at most 3 files per message"),
        ("fourth.txt", "at most 3 files per message"),
    ]
    assert intake.tabular == ["sales.csv"]
    assert "Not used: huge.bin: larger than the 0.0001 MB limit." in intake.message()
    assert "../../etc/passwd is in /mnt/data as passwd." in intake.message()


async def test_empty_files_and_the_total_cap() -> None:
    intake = await receive(
        [
            IncomingFile("empty.csv", 0, b""),
            IncomingFile("a", 90, b"a" * 90),
            IncomingFile("b", 90, b"b" * 90),
        ],
        limits=LIMITS,
    )
    assert intake.files == {"empty.csv": b"", "a": b"a" * 90}
    assert intake.refused[0].reason == "the files together exceed 0.00015 MB"


async def test_downloads_use_the_platform_credentials_and_stop_at_the_cap(file_server: str) -> None:
    fetch = http_fetcher({"Authorization": "Bearer xoxb-test"})
    intake = await receive(
        [
            IncomingFile("small.txt", None, url=f"{file_server}/10"),
            IncomingFile("lied-about-size.txt", 5, url=f"{file_server}/5000"),
            IncomingFile("gone.txt", 1, url=f"{file_server}/nope"),
        ],
        fetch,
        LIMITS,
    )
    assert intake.files == {"small.txt": b"x" * 10}
    assert [(r.name, r.reason) for r in intake.refused] == [
        ("lied-about-size.txt", "larger than the 0.0001 MB limit"),
        ("gone.txt", "downloading it failed (HTTP 500)"),
    ]
    denied = await receive([IncomingFile("x", 1, url=f"{file_server}/1")], http_fetcher(), LIMITS)
    assert denied.refused[0].reason == "downloading it failed (HTTP 403)"
