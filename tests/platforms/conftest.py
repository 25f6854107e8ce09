from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from executor import Executor, PoolSettings, SandboxLimits, default_tag
from tests.integration.conftest import TEST_INSTANCE
from tests.support.agents import clients, make_agent, model

__all__ = ["clients", "make_agent", "model"]


@pytest.fixture
async def executor() -> AsyncIterator[Executor]:
    async with Executor(
        default_tag(),
        limits=SandboxLimits(timeout_s=30),
        instance=TEST_INSTANCE,
        pool=PoolSettings(size=0),
    ) as ex:
        yield ex
