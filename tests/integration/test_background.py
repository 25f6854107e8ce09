"""A real run past its time limit under runc and runsc: it goes on in the background (the
turn ends at once saying so), its output keeps coming, a follow-up's code waits for it and
then sees what it left in the kernel, and its end is posted with the starter named."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import pytest

from bot.agent import Agent, AgentLimits
from bot.agent.history import History
from bot.conversations import Conversations
from bot.database import Databases
from bot.platforms.console import Console, run_piped
from bot.platforms.console_reply import WAITS_BEHIND_PIPED
from executor import Executor, SandboxLimits, default_tag
from storage.local import LocalStorage
from tests.integration.conftest import NO_POOL, TEST_INSTANCE
from tests.support.links import SECRET

pytestmark = [pytest.mark.docker, pytest.mark.any_runtime]

LONG = """```python
import time
for step in range(6):
    print('epoch', step, flush=True)
    time.sleep(1)
trained = 'model-v1'
```"""
AFTER = """```python
print('using', trained)
```"""


async def test_a_run_past_its_limit_goes_on_in_the_background(runtime: str, tmp_path: Path) -> None:
    limits = SandboxLimits(runtime=runtime, timeout_s=2)  # type: ignore[arg-type]
    async with Executor(default_tag(), limits=limits, instance=TEST_INSTANCE, pool=NO_POOL) as ex:
        agent = Agent(
            ex,
            LocalStorage(tmp_path / "files", SECRET),
            History(Databases.sqlite(tmp_path)),
            client=None,
            model="none",
            limits=AgentLimits(),
        )
        conversations = Conversations(agent, background_max_s=60)
        out = io.StringIO()
        console = Console(conversations, out, tmp_path / "exports")

        async def say(message: str) -> str:
            start = out.tell()
            await run_piped(console, io.StringIO(message + "\n"))
            return out.getvalue()[start:]

        try:
            turn = await say(LONG)
            assert "⏳ This run goes on in the background (up to 1 min in all)" in turn
            assert "epoch 5" not in turn
            follow = await say(AFTER)  # waits for the background run, in the same kernel
            assert WAITS_BEHIND_PIPED in follow
            assert "using model-v1\n" in follow
            async with asyncio.timeout(30):
                while conversations.background.runs:  # noqa: ASYNC110 (its report is last)
                    await asyncio.sleep(0.05)
            shown = out.getvalue()
            assert "epoch 5\n" in shown
            assert "Your background run ended: it finished in" in shown
            assert "time limit" not in shown
        finally:
            await conversations.background.close()
            await agent.reset("console:dm:console:")
