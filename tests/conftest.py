"""Shared fixtures. Integration tests need a Docker engine and the sandbox image, storage
tests need Azurite: `make test` provides all three. A missing one fails those tests; it
never skips them."""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import docker
import pytest
from aiohttp import web

from bench.standins.ports import free_port
from bot.database import Databases
from bot.database.sql import ENGINES
from bot.ops.http import create_app, start_server
from storage.azure_blob import AzureBlobStorage
from storage.base import Storage
from storage.local import LocalStorage
from tests.support.azurite import Azurite
from tests.support.links import SECRET
from tests.support.postgres import Postgres, PostgresMissing

# Each checkout is a test instance of its own (sandbox label, and so its own sweep), so
# that test runs of two checkouts on one engine never remove each other's sandboxes; under
# pytest-xdist every worker is one too. Set before the layers' conftests read it.
os.environ.setdefault(
    "CELLMATE_TEST_INSTANCE",
    "tests-" + hashlib.sha256(str(Path(__file__).resolve().parent).encode()).hexdigest()[:6],
)
if worker := os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["CELLMATE_TEST_INSTANCE"] = (
        f"{os.environ.get('CELLMATE_TEST_INSTANCE', 'tests')}-{worker}"
    )

SERIAL_PATHS = (
    "tests/integration/test_engine_restart.py",  # restarts dockerd under everyone's sandboxes
    # Plain volumes carry no instance label: every worker's sweep may take the one it plants.
    "tests/integration/test_sandbox_hardening.py::test_the_sweep_removes_plain_leftover_volumes",
    # 100 turns at once with the bot's memory bounded, and an engine restart under turns.
    "tests/platforms/test_load.py::test_a_hundred_mentions_at_once",
    "tests/platforms/test_load.py::test_an_engine_restart",
)
"""Tests (files, or test names within a file) that take the whole engine or machine: marked
`serial`, run after the parallel phase."""


LONG_FIRST = (
    "tests/compose/test_stack.py",  # the Compose stack up, through a restart, and down
    "tests/integration/test_background_restart.py",  # a real 90-second run, per runtime
    "tests/kubernetes/test_background_restart.py",
)
"""Tests that take a minute or more: the parallel phase starts them first, all in the first
worker's share (the others take the rest of it as they run out), so that no worker is left
with one of them at the end."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: not item.nodeid.startswith(LONG_FIRST))  # stable: else as found
    for item in items:
        if item.nodeid.startswith(SERIAL_PATHS):
            item.add_marker(pytest.mark.serial)


_last_engine_test = ["(none yet)"]


@pytest.fixture(autouse=True)
def sandboxes_end_with_their_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test that uses the engine leaves none of this process's sandboxes (containers,
    volumes, networks) behind. What one leaves fails that test, and is removed, so that it
    fails no other; what appears between tests fails the next one, naming the one before."""
    if request.node.get_closest_marker("docker") is None:
        yield
        return
    # Imported here: the module reads this worker's instance, set above, when first imported.
    from tests.support.sandboxes import describe, left_behind, live_sandboxes, sweep

    client = docker.from_env()
    try:
        if live_sandboxes(client):
            found = describe(client)
            sweep(client)
            pytest.fail(
                f"sandboxes appeared after {_last_engine_test[0]} had ended:\n{found}",
                pytrace=False,
            )
        _last_engine_test[0] = request.node.nodeid
        yield
        if left_behind(client):
            found = describe(client)
            sweep(client)
            pytest.fail(f"a sandbox was left behind:\n{found}", pytrace=False)
    finally:
        client.close()


@pytest.fixture(scope="session")
def azurite() -> Iterator[Azurite]:
    server = Azurite().start()
    yield server
    server.close()


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """This process's own PostgreSQL server (each xdist worker starts one)."""
    try:
        server = Postgres().start()
    except PostgresMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    yield server
    server.close()


@pytest.fixture
def postgres_url(postgres: Postgres) -> Iterator[str]:
    """An empty database of the test's own on that server."""
    url = postgres.create_database()
    yield url
    postgres.drop_database(url)


@pytest.fixture(params=ENGINES)
def databases(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Databases]:
    """Where a test's stores keep their tables: SQLite files in its tmp_path, or a
    PostgreSQL database of its own."""
    if request.param == "sqlite":
        yield Databases.sqlite(tmp_path / "data")
        return
    where = Databases(request.getfixturevalue("postgres_url"))
    yield where
    where.close()


@pytest.fixture
def shared_database(postgres_url: str) -> Iterator[Databases]:
    """One PostgreSQL database that a test's replicas (several bots) share."""
    where = Databases(postgres_url)
    yield where
    where.close()


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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Captured output holding lone surrogates (tests of undecodable file names) is escaped,
    so that pytest-xdist can send the report from its worker."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    report.sections = [
        (title, text.encode("utf-8", "backslashreplace").decode("utf-8"))
        for title, text in report.sections
    ]
