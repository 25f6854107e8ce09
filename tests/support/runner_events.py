"""Reading a runner's events directly, as the protocol tests do."""

from __future__ import annotations

import asyncio
from typing import Any

from executor import wire
from executor.runner_client import RunnerClient


async def notices_and_outputs(client: RunnerClient, run_id: str) -> tuple[list[str], list[Any]]:
    """The runner's notices, and every output (of any run), until the run's `done`."""
    notices: list[str] = []
    outputs: list[Any] = []
    async with asyncio.timeout(120):
        while (event := await client.event()) is not None:
            if isinstance(event, wire.Log):
                notices.append(event.message)
            elif isinstance(event, wire.Output):
                outputs.append(event.output)
            elif isinstance(event, wire.Done) and event.id == run_id:
                break
    return notices, outputs
