"""Stable links on the bot's HTTP server, for local files and Azure Blob (Azurite): each click
checks the file and redirects to a freshly signed short link, so a link keeps working after
any one signed link expired and after a restart, and stops (with a clear page) once
retention removed the file; ids cannot be made up or changed."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import aiohttp
import pytest
from aiohttp import web

from bench.standins.ports import free_port
from bot.ops.http import create_app, start_server
from storage.base import Storage
from storage.names import artifact_key, new_run_id
from storage.stable_links import StableLinks
from tests.support.links import fetch

SECRET = b"s" * 32


@pytest.fixture
def bot_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


async def serve(links: StableLinks, bot_url: str) -> web.AppRunner:
    return await start_server(
        create_app(None, links=links), "127.0.0.1", int(bot_url.rsplit(":", 1)[1])
    )


async def click(link: str) -> tuple[int, str, bytes]:
    """What a browser gets: the bot's answer, where it sent the browser, and what it found."""
    async with aiohttp.ClientSession() as client:
        async with client.get(link, allow_redirects=False) as first:
            if first.status != 302:
                return first.status, "", await first.read()
            target = first.headers["Location"]
        got = await fetch(target)
        return got.status, target, got.body


async def test_a_stable_link_outlives_every_signed_link_and_a_restart(
    storage: Storage, bot_url: str
) -> None:
    links = StableLinks(storage, SECRET, bot_url, click_expiry=timedelta(seconds=2))
    runner = await serve(links, bot_url)
    key = artifact_key("slack:T1:C1:1.2", new_run_id(), "report.csv")
    await links.put(key, b"a,b\n1,2\n", "text/csv")
    link = await links.link(key)
    assert link.startswith(f"{bot_url}/a/")
    assert "report" not in link  # the id says nothing of the conversation or the file
    status, first_target, body = await click(link)
    assert (status, body) == (200, b"a,b\n1,2\n")
    await asyncio.sleep(3)  # the signed link of the first click has expired
    assert (await fetch(first_target)).status in (403, 404)
    status, second_target, body = await click(link)
    assert (status, body) == (200, b"a,b\n1,2\n")
    assert second_target != first_target
    await runner.cleanup()

    # A restart: a new process with the same secret makes and reads the same ids.
    again = StableLinks(storage, SECRET, bot_url)
    runner = await serve(again, bot_url)
    assert await again.link(key) == link
    assert (await click(link))[0] == 200

    await storage.delete(key)  # what retention does
    status, _, page = await click(link)
    assert status == 404
    assert b"no longer available" in page
    await runner.cleanup()


@pytest.mark.parametrize("tamper", ["flip", "foreign", "garbage", "empty-ish"])
async def test_ids_that_the_bot_did_not_make_get_the_same_404(
    storage: Storage, bot_url: str, tamper: str
) -> None:
    links = StableLinks(storage, SECRET, bot_url)
    key = artifact_key("c", new_run_id(), "a.txt")
    await links.put(key, b"x", "text/plain")
    real = (await links.link(key)).rsplit("/", 1)[1]
    forged = {
        "flip": real[:-3] + ("A" if real[-3] != "A" else "B") + real[-2:],
        "foreign": (await StableLinks(storage, b"o" * 32, bot_url).link(key)).rsplit("/", 1)[1],
        "garbage": "not-an-id-%2F..%2Fetc",
        "empty-ish": "A",
    }[tamper]
    runner = await serve(links, bot_url)
    status, _, page = await click(f"{bot_url}/a/{forged}")
    assert status == 404
    assert b"no longer available" in page
    await runner.cleanup()
