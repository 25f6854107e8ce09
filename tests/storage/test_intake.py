"""Attachments in: caps, names, and downloads over real HTTP on loopback, with the
platform's credentials sent to its own file host only."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from bench.standins.ports import free_port
from storage.intake import (
    SLACK_FILE_HOSTS,
    IncomingFile,
    IntakeLimits,
    file_hosts,
    http_fetcher,
    receive,
)
from tests.support.network import refuse_outside_network

LIMITS = IntakeLimits(max_bytes=100, max_count=3, max_total_bytes=150)
TOKEN = {"Authorization": "Bearer xoxb-test"}


async def _serve(app: web.Application, host: str, port: int) -> web.AppRunner:
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


@pytest.fixture
async def file_server() -> AsyncIterator[str]:
    """The platform's file host: serves files to the bot token, redirects where told."""

    async def serve(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != "Bearer xoxb-test":
            return web.Response(status=403)
        size = int(request.match_info["size"])
        return web.Response(body=b"x" * size)

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPFound(request.query["to"])

    app = web.Application()
    app.router.add_get("/files/{size}", serve)
    app.router.add_get("/redirect", redirect)
    runner = await _serve(app, "127.0.0.1", free_port())
    yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


@pytest.fixture
async def foreign() -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    """Another host, on 127.0.0.2 and on another port of 127.0.0.1, that records the headers
    of every request it gets and serves a file to anyone."""
    seen: list[dict[str, str]] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        return web.Response(body=b"public")

    app = web.Application()
    app.router.add_get("/{tail:.*}", record)
    port = free_port()
    runner = await _serve(app, "127.0.0.2", port)
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield f"127.0.0.2:{port}", seen
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
    fetch = http_fetcher([file_server], TOKEN)
    intake = await receive(
        [
            IncomingFile("small.txt", None, url=f"{file_server}/files/10"),
            IncomingFile("lied-about-size.txt", 5, url=f"{file_server}/files/5000"),
            IncomingFile("gone.txt", 1, url=f"{file_server}/files/nope"),
        ],
        fetch,
        LIMITS,
    )
    assert intake.files == {"small.txt": b"x" * 10}
    assert [(r.name, r.reason) for r in intake.refused] == [
        ("lied-about-size.txt", "larger than the 0.0001 MB limit"),
        ("gone.txt", "downloading it failed (HTTP 500)"),
    ]
    denied = await receive(
        [IncomingFile("x", 1, url=f"{file_server}/files/1")], http_fetcher([file_server]), LIMITS
    )
    assert denied.refused[0].reason == "downloading it failed (HTTP 403)"


async def test_the_token_goes_to_the_platform_file_host_only(
    file_server: str, foreign: tuple[str, list[dict[str, str]]]
) -> None:
    other, seen = foreign
    port = file_server.rsplit(":", 1)[1]
    other_port = other.rsplit(":", 1)[1]
    fetch = http_fetcher([file_server], TOKEN, where="Slack's file servers")
    refused = [
        f"http://{other}/x.csv",  # another host
        f"http://127.0.0.1:{other_port}/x.csv",  # the same host, another port
        f"http://127.0.0.1:{port}@{other}/x.csv",  # the file host as userinfo
        f"http://xoxb:pw@127.0.0.1:{port}/files/1",  # userinfo on the file host itself
        f"http://{other}/127.0.0.1:{port}/files/1",  # the file host in the path
        f"https://127.0.0.1:{port}/files/1",  # another scheme
        f"ftp://127.0.0.1:{port}/files/1",
        "not a url at all",
    ]
    intake = await receive(
        [IncomingFile(f"f{i}.csv", 1, url=url) for i, url in enumerate(refused)],
        fetch,
        IntakeLimits(max_count=20),
    )
    assert intake.files == {}
    assert [r.reason for r in intake.refused][:3] == [
        "it is not stored on Slack's file servers (127.0.0.2)",
        "it is not stored on Slack's file servers (127.0.0.1)",
        "it is not stored on Slack's file servers (127.0.0.2)",
    ]
    assert len(intake.refused) == len(refused)
    assert seen == []  # nothing was even asked for

    # A redirect from the file host to another one is followed without the token.
    redirected = await receive(
        [IncomingFile("moved.csv", 6, url=f"{file_server}/redirect?to=http://{other}/moved")],
        fetch,
        LIMITS,
    )
    assert redirected.files == {"moved.csv": b"public"}
    assert len(seen) == 1
    assert "Authorization" not in seen[0]
    assert all("xoxb" not in value for headers in seen for value in headers.values())


@pytest.mark.parametrize(
    "url",
    [
        "https://files.slack.com.evil.example/x.csv",
        "https://evil.example/files.slack.com/x.csv",
        "https://files.slack.com@evil.example/x.csv",
        "https://evil.example?files.slack.com",
        "http://files.slack.com/x.csv",
        "ftp://files.slack.com/x.csv",
        "//files.slack.com/x.csv",
        "https://files.slack.com:8443/x.csv",
        "https://slack.com/x.csv",
    ],
)
async def test_only_exact_slack_file_hosts_are_trusted(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    tried = refuse_outside_network(monkeypatch)
    fetch = http_fetcher(SLACK_FILE_HOSTS, TOKEN, where="Slack's file servers")
    intake = await receive([IncomingFile("x.csv", 1, url=url)], fetch, LIMITS)
    assert tried == []  # refused by name, before any lookup or connection
    assert intake.files == {}
    assert intake.refused[0].reason.startswith("it is not stored on Slack's file servers")
    assert "Not used: x.csv: it is not stored on Slack's file servers" in intake.message()


def test_file_host_settings_take_hosts_and_origins() -> None:
    assert file_hosts(["files.slack.com", "http://127.0.0.1:8123/", " "]) == {
        ("https", "files.slack.com", 443),
        ("http", "127.0.0.1", 8123),
    }
    for bad in ("ftp://files.slack.com", "https://user@files.slack.com"):
        with pytest.raises(ValueError, match="not a host name"):
            file_hosts([bad])
