"""Shared fixtures. Integration tests need a Docker engine and the sandbox image, storage
tests need Azurite: `make test` provides all three. A missing one fails those tests; it
never skips them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.storage.azurite import Azurite


@pytest.fixture(scope="session")
def azurite() -> Iterator[Azurite]:
    server = Azurite().start()
    yield server
    server.close()
