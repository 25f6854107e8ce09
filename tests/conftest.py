"""Shared fixtures. Integration tests need a Docker engine and the sandbox image, storage
tests need Azurite: `make test` provides all three. A missing one fails those tests; it
never skips them."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from bot.http import create_app, start_server
from storage.azure_blob import AzureBlobStorage
from storage.base import Storage
from storage.local import LocalStorage
from tests.storage.azurite import Azurite, free_port

SECRET = b"test-secret-for-links-0123456789"


@pytest.fixture(scope="session")
def azurite() -> Iterator[Azurite]:
    server = Azurite().start()
    yield server
    server.close()


@dataclass
class Fetched:
    status: int
    headers: dict[str, str]
    body: bytes


async def fetch(link: str) -> Fetched:
    async with aiohttp.ClientSession() as client, client.get(link) as response:
        return Fetched(response.status, dict(response.headers), await response.read())


@pytest.fixture
async def local_storage(tmp_path: Path) -> AsyncIterator[LocalStorage]:
    port = free_port()
    storage = LocalStorage(tmp_path / "files", SECRET, base_url=f"http://127.0.0.1:{port}")
    await storage.check()
    runner: web.AppRunner = await start_server(create_app(storage), "127.0.0.1", port)
    yield storage
    await runner.cleanup()


@pytest.fixture
async def azure_storage(azurite: Azurite) -> AsyncIterator[AzureBlobStorage]:
    storage = AzureBlobStorage(
        container=f"test-{uuid.uuid4().hex[:12]}", connection_string=azurite.connection_string()
    )
    await storage.check()
    yield storage
    await storage.close()


@pytest.fixture(params=["local", "azure"])
def storage(request: pytest.FixtureRequest) -> Storage:
    return request.getfixturevalue(f"{request.param}_storage")  # type: ignore[no-any-return]
