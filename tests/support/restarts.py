"""Restarts of the bot, in one test: each `Bot` is one process (an executor, the
conversation layer with its background runs' store, and the console as its platform), shut
down as the bot shuts down; the next one starts on the same backend, store and history."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.agent import Agent, AgentLimits
from bot.agent.history import History
from bot.conversations import Conversations
from bot.conversations.background import FOLLOWED_AFTER_RESTART, GOES_ON_THROUGH_RESTART
from bot.conversations.background_store import BackgroundStore
from bot.database import Databases
from bot.platforms.console import Console, run_piped
from executor import Executor
from storage.local import LocalStorage

ENDED = "Your background run ended"
SECRET_FOR_LINKS = b"r" * 32
"""What the console shows when a person's background run ends (the console's mention)."""


@dataclass
class Bot:
    executor: Executor
    conversations: Conversations
    console: Console
    out: io.StringIO

    async def say(self, message: str) -> str:
        start = self.out.tell()
        await run_piped(self.console, io.StringIO(message + "\n"))
        return self.out.getvalue()[start:]

    async def printed(self, text: str, timeout_s: float = 20) -> None:
        async with asyncio.timeout(timeout_s):
            while text not in self.out.getvalue():  # noqa: ASYNC110 (a StringIO has no event)
                await asyncio.sleep(0.02)

    async def settled(self, timeout_s: float = 20) -> None:
        """Until every background run has been reported and forgotten."""
        async with asyncio.timeout(timeout_s):
            while self.conversations.background.runs:  # noqa: ASYNC110 (no event to wait on)
                await asyncio.sleep(0.02)

    async def stop(self) -> None:
        """Shut down as the bot does: background runs first, then the executor."""
        await self.conversations.background.close(grace_s=5)
        await self.executor.aclose()


@dataclass
class Restarts:
    executor: Callable[[], Executor]
    """A new executor on the same backend (and secret) each time."""
    store: BackgroundStore
    make_agent: Callable[..., Agent]
    tmp_path: Path
    background_max_s: float = 30
    running: list[Bot] = field(default_factory=list)

    async def start(self) -> Bot:
        executor = self.executor()
        await executor.__aenter__()
        agent = self.make_agent(executor, None, self.tmp_path, timeout=5)
        conversations = Conversations(
            agent, background_max_s=self.background_max_s, background_per_person=2
        )
        conversations.background.store = self.store
        out = io.StringIO()
        console = Console(conversations, out, self.tmp_path / "exports")
        bot = Bot(executor, conversations, console, out)
        self.running.append(bot)
        return bot

    async def stop(self, bot: Bot) -> None:
        self.running.remove(bot)
        await bot.stop()

    async def close(self) -> None:
        for bot in list(self.running):
            await self.stop(bot)


def ticking(seconds: int) -> str:
    """A run of `seconds` that prints a tick each second, then leaves a variable behind."""
    return (
        "```python\nimport time\n"
        f"for tick in range({seconds}):\n"
        "    print('tick', tick, flush=True)\n"
        "    time.sleep(1)\n"
        "trained = 'model-v1'\n```"
    )


USE_IT = "```python\nprint('using', trained)\n```"


async def a_long_run_survives_a_restart(restarts: Restarts, seconds: int) -> None:
    """A real run goes to the background at its limit, the bot restarts a few seconds in,
    and the next process follows it: its whole output, its end posted once, and the kernel
    it ran in goes on for the conversation."""
    first = await restarts.start()
    turn = await first.say(ticking(seconds))
    assert "⏳ This run goes on in the background" in turn, turn
    await first.printed("tick 3\n", timeout_s=180)
    await restarts.stop(first)
    assert GOES_ON_THROUGH_RESTART in first.out.getvalue()
    assert ENDED not in first.out.getvalue()

    second = await restarts.start()
    await second.printed(ENDED, timeout_s=seconds + 180)
    await second.settled()
    shown = second.out.getvalue()
    assert FOLLOWED_AFTER_RESTART.split("{ago}")[0] in shown
    ticks = [line for line in shown.splitlines() if line.startswith("tick ")]
    assert ticks == [f"tick {n}" for n in range(seconds)]  # each once, in order, none lost
    assert "Your background run ended: it finished in" in shown
    assert shown.count(ENDED) == 1
    assert restarts.store.of_platform("console") == []
    assert "using model-v1" in await second.say(USE_IT)


def agents_without_a_model(tmp_path: Path) -> Callable[..., Agent]:
    """Agents for real executors, without a model (the console's fenced code runs as it
    is), sharing one history and one store, as one bot's restarts do."""

    def make(executor: Executor, *_: Any, **__: Any) -> Agent:
        return Agent(
            executor,
            LocalStorage(tmp_path / "files", SECRET_FOR_LINKS),
            History(Databases.sqlite(tmp_path)),
            client=None,
            model="none",
            limits=AgentLimits(),
        )

    return make
