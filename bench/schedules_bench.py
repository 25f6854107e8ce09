"""How punctual schedules are: `python -m bench schedules [--runtime runsc] [--samples N]
[--due-together N]`.

On the real engine, with the bot's scheduler loop on the wall clock: how long after its time
a schedule's run is announced in its thread (one schedule due at a time, `--samples` times),
and then `--due-together` schedules (of as many people) due at the same moment: how late the
last one starts and how long until all have answered, with the most sandboxes seen at once
(CELLMATE_SCHEDULE_RUNS_AT_ONCE bounds them) and whether any run failed. Prints median and
p95 in ms, the machine and the settings, and one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from bench.executor_bench import Figures, machine
from bot.agent import Agent, AgentLimits
from bot.agent.history import History
from bot.conversations import Conversations, Person, Place
from bot.conversations.access import AccessRules
from bot.conversations.keys import ConversationKey
from bot.conversations.people import Admission
from bot.conversations.schedule_store import ScheduleStore
from bot.conversations.schedules import Scheduler, ScheduleSettings
from bot.database import Databases
from bot.events import ExecutionFinished, TurnEvent
from bot.settings import load_settings
from executor import Executor, PoolSettings, SandboxLimits, Status, default_tag
from storage.local import LocalStorage

INSTANCE = "bench-schedules"
CODE = "print('total:', 42)"
LEAD_S = 1.5
"""How far ahead of now each measured schedule is due."""


class Timings:
    def __init__(self) -> None:
        self.announced: dict[str, float] = {}
        self.answered: dict[str, float] = {}
        self.failed: list[str] = []


class BenchReply:
    def __init__(self, timings: Timings, key: ConversationKey) -> None:
        self.timings = timings
        self.key = key

    async def queued(self, stop: str, text: str) -> None:
        return None

    async def start(self, stop: str) -> None:
        return None

    def __call__(self, event: TurnEvent) -> Awaitable[None] | None:
        if isinstance(event, ExecutionFinished) and event.status is not Status.OK:
            self.timings.failed.append(f"{self.key.id}: {event.status} {event.message}")
        return None

    async def finish(self, rerun: str | None, notices: Sequence[str]) -> None:
        self.timings.answered[self.key.id] = time.time()

    async def refused(self, text: str) -> None:
        self.timings.failed.append(f"{self.key.id}: refused: {text}")

    async def failed(self, text: str) -> None:
        self.timings.failed.append(f"{self.key.id}: {text}")


class BenchPoster:
    def __init__(self, timings: Timings) -> None:
        self.timings = timings
        self.door = Admission(AccessRules())

    async def person(self, user: str, key: ConversationKey) -> Person:
        return Person(user, Place(user, key.workspace, key.channel))

    def mention(self, user: str) -> str:
        return user

    async def reply_in(self, key: ConversationKey, owner: str) -> BenchReply:
        return BenchReply(self.timings, key)

    async def say(self, key: ConversationKey, text: str, notify: str = "") -> None:
        if text.startswith("⏰"):
            self.timings.announced[key.id] = time.time()
        else:
            self.timings.failed.append(f"{key.id}: {text}")


async def measure(
    limits: SandboxLimits,
    pool: PoolSettings,
    settings: ScheduleSettings,
    samples: int,
    together: int,
    figures: Figures,
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        data = Path(folder)
        async with Executor(default_tag(), limits=limits, instance=INSTANCE, pool=pool) as ex:
            agent = Agent(
                ex,
                LocalStorage(data / "files", b"b" * 32),
                History(Databases.sqlite(data)),
                client=None,
                model="none",
                limits=AgentLimits(),
            )
            conversations = Conversations(agent)
            store = ScheduleStore(Databases.sqlite(data))
            scheduler = Scheduler(conversations, store, settings)
            conversations.schedules = scheduler
            timings = Timings()
            conversations.post_with("bench", BenchPoster(timings))
            scheduler.start()
            try:
                delays = []
                for n in range(samples):
                    due = time.time() + LEAD_S
                    key = _add(store, f"one-{n}", "owner", due)
                    scheduler.wake()
                    await _until(lambda k=key: k in timings.answered)  # type: ignore[misc]
                    delays.append((timings.announced[key] - due) * 1000)
                figures.add("schedule announced after its time", delays, "fire_delay")

                moment = time.time() + 3.0
                keys = [_add(store, f"many-{n}", f"user-{n}", moment) for n in range(together)]
                scheduler.wake()
                seen = 0

                async def count() -> None:
                    nonlocal seen
                    while True:
                        seen = max(seen, len(ex.sessions.active))
                        await asyncio.sleep(0.05)

                counting = asyncio.create_task(count())
                await _until(lambda: all(k in timings.answered for k in keys), 1800)
                counting.cancel()
                starts = [(timings.announced[k] - moment) * 1000 for k in keys]
                figures.add(f"{together} due at once: announced after the time", starts)
                last = max(timings.answered[k] for k in keys) - moment
                figures.summary["due_together"] = together
                figures.summary["due_together_last_start_s"] = round(max(starts) / 1000, 2)
                figures.summary["due_together_all_answered_s"] = round(last, 1)
                figures.summary["due_together_most_sandboxes"] = seen
                figures.summary["failed"] = len(timings.failed)
                for failure in timings.failed[:5]:
                    print(f"failed: {failure}")
            finally:
                await scheduler.close()
                store.close()


def _add(store: ScheduleStore, thread: str, owner: str, due: float) -> str:
    key = ConversationKey("bench", "w", "c", thread)
    store.add(key.id, owner, "w", "bench", "0 0 1 1 *", "UTC", [CODE], time.time(), due)
    return key.id


async def _until(done: Callable[[], bool], limit_s: float = 120) -> None:
    async with asyncio.timeout(limit_s):
        while not done():  # noqa: ASYNC110 (polls the timings)
            await asyncio.sleep(0.01)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench schedules")
    parser.add_argument("--runtime", choices=["runc", "runsc"], help="default: the settings'")
    parser.add_argument("--samples", type=int, default=20, help="single schedules timed")
    parser.add_argument("--due-together", type=int, default=100, help="schedules due at once")
    args = parser.parse_args(argv)
    settings = load_settings()
    limits = settings.sandbox
    if args.runtime:
        limits = dataclasses.replace(limits, runtime=args.runtime)
    figures = Figures()
    print(f"machine: {machine()}")
    print(
        f"settings: runtime {limits.runtime}, pool size {settings.pool.size}, max live "
        f"{settings.pool.max_live}, scheduled runs at once {settings.schedule.at_once}, "
        f"{args.samples} single schedules, {args.due_together} due together"
    )
    asyncio.run(
        measure(limits, settings.pool, settings.schedule, args.samples, args.due_together, figures)
    )
    figures.summary["runtime"] = limits.runtime
    print(f"{'figure':48} {'p50 ms':>9} {'p95 ms':>9} {'n':>5}")
    for name, p50, p95, count in figures.rows:
        print(f"{name:48} {p50:9.1f} {p95:9.1f} {count:5}")
    print(json.dumps(figures.summary))
    return 0
