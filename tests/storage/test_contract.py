"""The same contract for every storage backend: local files and Azure Blob (Azurite)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from urllib.parse import urlsplit, urlunsplit

import pytest

from storage.base import Storage
from storage.errors import InvalidKey, StorageError
from storage.names import artifact_key, new_run_id
from tests.support.links import fetch

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256))


async def test_put_link_fetch_list_delete(storage: Storage) -> None:
    key = artifact_key("slack:T1:C1:1.2", new_run_id(), "chart.png")
    stored = await storage.put(key, PNG, "image/png")
    assert (stored.key, stored.size, stored.content_type) == (key, len(PNG), "image/png")
    link = await storage.link(key)
    got = await fetch(link)
    assert got.status == 200
    assert got.body == PNG
    assert got.headers["Content-Type"] == "image/png"
    assert got.headers["Content-Disposition"].startswith("inline")
    listed = await storage.list(key.rsplit("/", 1)[0])
    assert [(o.key, o.size) for o in listed] == [(key, len(PNG))]
    await storage.delete(key)
    assert (await fetch(link)).status in (403, 404)
    assert await storage.list(key.rsplit("/", 1)[0]) == []


async def test_streams_and_empty_files(storage: Storage) -> None:
    async def chunks():  # type: ignore[no-untyped-def]
        for part in (b"a,b\n", b"1,2\n"):
            yield part

    key = artifact_key("c", new_run_id(), "table.csv")
    assert (await storage.put(key, chunks(), "text/csv")).size == 8
    assert (await fetch(await storage.link(key))).body == b"a,b\n1,2\n"
    empty = artifact_key("c", new_run_id(), "empty.txt")
    await storage.put(empty, b"", "text/plain")
    got = await fetch(await storage.link(empty))
    assert (got.status, got.body) == (200, b"")


@pytest.mark.parametrize(
    ("name", "content_type"),
    [
        ("page.html", "text/html"),
        ("drawing.svg", "image/svg+xml"),
        ("tool.exe", "application/octet-stream"),
        ("feed.xml", "application/xml"),
    ],
)
async def test_active_content_is_served_as_a_download(
    storage: Storage, name: str, content_type: str
) -> None:
    key = artifact_key("c", new_run_id(), name)
    await storage.put(key, b"<svg onload='alert(1)'><script>alert(1)</script></svg>", content_type)
    got = await fetch(await storage.link(key))
    assert got.status == 200
    assert got.headers["Content-Disposition"].startswith("attachment")
    assert got.headers["Content-Type"].startswith(content_type)


async def test_an_expired_link_is_refused(storage: Storage) -> None:
    key = artifact_key("c", new_run_id(), "old.txt")
    await storage.put(key, b"old", "text/plain")
    link = await storage.link(key, expires_in=timedelta(seconds=1))
    assert (await fetch(link)).status == 200
    await asyncio.sleep(2.5)
    assert (await fetch(link)).status in (403, 404)


async def test_a_link_cannot_be_turned_into_another_conversations(storage: Storage) -> None:
    mine = artifact_key("conversation-a", new_run_id(), "result.csv")
    theirs = artifact_key("conversation-b", new_run_id(), "result.csv")
    await storage.put(mine, b"mine", "text/csv")
    await storage.put(theirs, b"theirs", "text/csv")
    link = urlsplit(await storage.link(mine))
    path = link.path.replace(mine, theirs)
    assert path != link.path
    forged = urlunsplit((link.scheme, link.netloc, path, link.query, ""))
    assert (await fetch(forged)).status in (403, 404)
    tampered = urlunsplit((link.scheme, link.netloc, link.path, link.query[:-4] + "0000", ""))
    assert (await fetch(tampered)).status in (403, 404)


@pytest.mark.parametrize(
    "key", ["../escape", "/etc/passwd", "a/../../b", "a//b", "a\x00b", "a\nb", "", ".hidden"]
)
async def test_unsafe_keys_are_refused(storage: Storage, key: str) -> None:
    with pytest.raises(InvalidKey):
        await storage.put(key, b"x", "text/plain")


async def test_size_cap(storage: Storage) -> None:
    with pytest.raises(StorageError, match="larger than 10 bytes"):
        await storage.put(
            artifact_key("c", new_run_id(), "big.bin"), b"x" * 11, "application/octet-stream", 10
        )


async def test_list_is_by_prefix(storage: Storage) -> None:
    a = artifact_key("a", new_run_id(), "x.txt")
    b = artifact_key("b", new_run_id(), "y.txt")
    await storage.put(a, b"1", "text/plain")
    await storage.put(b, b"2", "text/plain")
    assert [o.key for o in await storage.list(a.split("/")[0])] == [a]


async def test_prune_removes_only_what_is_old(storage: Storage) -> None:
    from datetime import UTC, datetime

    from storage.retention import prune

    keys = [artifact_key("prune", new_run_id(), f"{n}.txt") for n in ("a", "b")]
    for key in keys:
        await storage.put(key, b"x", "text/plain")
    assert await prune(storage, timedelta(days=30)) == 0
    later = datetime.now(UTC) + timedelta(days=31)
    assert await prune(storage, timedelta(days=30), now=later) >= 2
    assert await storage.list(keys[0].split("/")[0]) == []


async def test_pruning_on_a_schedule(storage: Storage) -> None:
    from storage.retention import prune_periodically

    key = artifact_key("scheduled", new_run_id(), "fresh.txt")
    await storage.put(key, b"x", "text/plain")
    task = asyncio.create_task(prune_periodically(storage, keep_days=0, every=timedelta(hours=1)))
    try:
        for _ in range(100):
            if not await storage.list(key.split("/")[0]):
                break
            await asyncio.sleep(0.05)
    finally:
        task.cancel()
    assert await storage.list(key.split("/")[0]) == []
