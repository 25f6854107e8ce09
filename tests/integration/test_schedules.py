"""A real schedule under runc and runsc: the console's conversation reads a data file, a
schedule of it fires twice (the clock moved by the test) in fresh sandboxes that get a copy
of the conversation's files, the data changes between the two, and the second run's post
names the number that moved. The fresh sandboxes end with their runs."""

from __future__ import annotations

import asyncio
import io
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.agent import Agent, AgentLimits
from bot.agent.history import History
from bot.conversations import Conversations
from bot.conversations.schedule_store import ScheduleStore
from bot.conversations.schedules import Scheduler, ScheduleSettings
from bot.database import Databases
from bot.platforms.console import Console, run_piped
from executor import Executor
from storage.local import LocalStorage
from tests.support.links import SECRET

pytestmark = pytest.mark.docker

WRITE = """```python
open('/mnt/data/sales.csv', 'w').write('month,sales\\n1,10\\n2,30\\n3,20\\n')
```"""
REPORT = """```python
import csv
rows = list(csv.DictReader(open('/mnt/data/sales.csv')))
print('total:', sum(int(r['sales']) for r in rows))
print('months:', len(rows))
```"""
GROWN = """```python
with open('/mnt/data/sales.csv', 'a') as f:
    f.write('4,40\\n')
```"""
FIRST = datetime(2026, 11, 27, 10, 0, tzinfo=UTC).timestamp()


async def test_a_schedule_fires_twice_and_posts_what_the_changed_data_moved(
    executor: Executor, tmp_path: Path
) -> None:
    agent = Agent(
        executor,
        LocalStorage(tmp_path / "files", SECRET),
        History(Databases.sqlite(tmp_path)),
        client=None,
        model="none",
        limits=AgentLimits(),
    )
    conversations = Conversations(agent)
    store = ScheduleStore(Databases.sqlite(tmp_path))
    clock = [datetime(2026, 11, 26, 12, 0, tzinfo=UTC).timestamp()]
    scheduler = Scheduler(conversations, store, ScheduleSettings(), now=lambda: clock[0])
    conversations.schedules = scheduler
    out = io.StringIO()
    console = Console(conversations, out, tmp_path / "exports")

    async def say(*messages: str) -> str:
        start = out.tell()
        await run_piped(console, io.StringIO("\n\n".join(messages) + "\n"))
        return out.getvalue()[start:]

    async def due(moment: float) -> str:
        clock[0] = moment
        start = out.tell()
        await asyncio.gather(*scheduler.tick())
        return out.getvalue()[start:]

    try:
        made = await say(WRITE, REPORT, "/schedule daily 10:00 UTC cells 2")
        assert "total: 60" in made
        assert "Schedule 1 made: daily 10:00 UTC" in made

        first = await due(FIRST)
        assert "⏰ Schedule 1 (daily 10:00 UTC) for you" in first
        assert "total: 60\nmonths: 3\n" in first
        assert "first run" in first

        await say(GROWN)  # the conversation's data grows; its session keeps running
        second = await due(FIRST + 86400)
        assert "total: 100\nmonths: 4\n" in second
        assert (
            "Numbers that moved: total: 60 → 100 (+40, +66.7%); months: 3 → 4 (+1, +33.3%)."
            in second
        )
        # The conversation's own session was not touched by the runs.
        assert "total: 100" in await say(REPORT)
        assert executor.sessions.active == ["console:dm:console:"]
    finally:
        await scheduler.close()
        store.close()
        await agent.reset("console:dm:console:")
