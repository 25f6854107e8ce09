"""What only one backend does: Azure's credentials and outages, local links and routes."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from storage.azure_blob import AzureBlobStorage
from storage.errors import StorageAuthError, StorageUnavailable
from storage.local import LocalStorage
from storage.names import artifact_key, new_run_id
from tests.support.azurite import Azurite
from tests.support.links import SECRET, fetch


async def test_wrong_azure_credentials_fail_once_at_start_up(azurite: Azurite) -> None:
    wrong = "A" * 86 + "=="
    storage = AzureBlobStorage(
        container="creds", connection_string=azurite.connection_string(key=wrong)
    )
    try:
        with pytest.raises(StorageAuthError, match="refused the credentials"):
            await storage.check()
    finally:
        await storage.close()


@pytest.mark.timeout(60)  # bounded retries: seconds, not the SDK's default minute and more
async def test_azure_outage_is_a_clear_error() -> None:
    server = Azurite().start()
    storage = AzureBlobStorage(container="outage", connection_string=server.connection_string())
    try:
        await storage.check()
        server.stop()
        with pytest.raises(StorageUnavailable, match="did not answer"):
            await storage.put(artifact_key("c", new_run_id(), "a.txt"), b"a", "text/plain")
    finally:
        await storage.close()
        server.close()


async def test_local_links_without_a_base_url_are_file_paths(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path, SECRET)
    key = artifact_key("console", new_run_id(), "out.csv")
    await storage.put(key, b"a,b\n", "text/csv")
    link = await storage.link(key)
    assert link == (tmp_path / key).resolve().as_uri()
    assert await asyncio.to_thread(Path(link.removeprefix("file://")).read_bytes) == b"a,b\n"


async def test_the_files_route_lists_nothing_and_reaches_nothing_outside(
    local_storage: LocalStorage,
) -> None:
    key = artifact_key("c", new_run_id(), "x.txt")
    await local_storage.put(key, b"x", "text/plain")
    link = await local_storage.link(key)
    base = link.split("/files/")[0]
    folder = key.rsplit("/", 1)[0]
    for path in [
        "/files/",
        f"/files/{folder}",
        f"/files/{folder}/",
        "/files/..%2F..%2Fetc%2Fpasswd",
        "/files/x.txt.meta.json",
    ]:
        assert (await fetch(base + path)).status == 404, path
    expires, sig = link.split("?")[1].split("&")
    meta = f"{base}/files/{key}.meta.json?{expires}&{sig}"
    assert (await fetch(meta)).status == 404
    got = await fetch(link)
    assert got.headers["X-Content-Type-Options"] == "nosniff"
    assert got.headers["Content-Type"] == "text/plain; charset=utf-8"


def test_local_storage_needs_a_real_secret(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least 16 bytes"):
        LocalStorage(tmp_path, b"short")


def test_azure_needs_settings() -> None:
    with pytest.raises(ValueError, match="AZURE_STORAGE_CONNECTION_STRING"):
        AzureBlobStorage(container=f"c{uuid.uuid4().hex[:6]}")
