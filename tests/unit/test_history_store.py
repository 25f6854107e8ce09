"""The history store under turns that are stopped while their statement runs: a stopped
turn's statement finishes on its own, and no other turn's statement runs beside it on the
shared connection (which SQLite refuses with "bad parameter or other API misuse")."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from bot.agent.history import History
from bot.database import Databases


async def test_turns_stopped_mid_statement_leave_every_other_turn_working(tmp_path: Path) -> None:
    history = History(Databases.sqlite(tmp_path))
    rng = random.Random(7)  # noqa: S311 - a repeatable order of stops, not a secret
    big = {"role": "user", "content": "x" * 20_000}

    async def turn(n: int) -> None:
        key = f"c{n % 7}"
        await history.append(key, [big, {"role": "assistant", "content": f"answer {n}"}])
        await history.load(key)
        await history.summary(key)

    for _ in range(6):
        tasks = [asyncio.create_task(turn(n)) for n in range(60)]
        for _ in range(25):
            await asyncio.sleep(rng.random() / 2_000)
            rng.choice(tasks).cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        failures = [
            r
            for r in results
            if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError)
        ]
        assert failures == []

    # Every turn that was not stopped is in the history, whole.
    stored = await history.load("c0")
    assert all(
        m.message["content"] in (big["content"],) or m.message["content"].startswith("answer ")
        for m in stored
    )
    await history.forget("c0")
    assert await history.load("c0") == []
