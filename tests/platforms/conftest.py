from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.platforms.openai_server import ScriptedModel


@pytest.fixture
async def model() -> AsyncIterator[ScriptedModel]:
    """An OpenAI-compatible server on loopback that answers from the test's script."""
    server = await ScriptedModel().start()
    yield server
    await server.stop()
