"""Runs in the background: a run that outlasts its turn (it reached its time limit, a person
pressed Keep running, or `/run --background`) goes on under CELLMATE_BACKGROUND_RUN_MAX_S.

    turn's run ──(limit / Keep running / --background)──> BackgroundRuns.take
        a message of its own in the thread: the code, its output as it comes, Stop
        the run ends ──> its status and files there, as any run's; then a message that
        mentions who started it; the model's history notes how it ended
        Stop ──> Conversations.stop ──> the run's stop event (the kernel is interrupted)

A person may have CELLMATE_BACKGROUND_RUNS_PER_PERSON of them at once; past that, a run
ends at its limit as before. The conversation goes on meanwhile: code run in it waits for
the background run (the session runs one cell at a time), and says so.

Where sessions survive a restart (Kubernetes; Docker with CELLMATE_SESSION_SECRET), a run
that goes to the background is kept (executor `Session.keep`) and stored
(`BackgroundStore`): a shutdown leaves it going and tells its thread so, and the next start
follows it (`Session.follow`) once its platform is up, in a new message with its whole
output, to its end. Elsewhere a shutdown stops it, and says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from bot.agent.detach import DetachedRun, call
from bot.conversations.background_store import BackgroundStore, StoredRun
from bot.conversations.keys import ConversationKey
from bot.conversations.quotas import Quotas
from bot.conversations.registry import Turns
from bot.conversations.reply import Reply
from bot.conversations.schedule_runs import Poster
from bot.events import Answer, CodeStarted
from executor import ExecutionResult, Status

if TYPE_CHECKING:
    from bot.agent import Agent

log = logging.getLogger(__name__)

STOPPED_FOR_SHUTDOWN = "The bot is shutting down, so this background run was stopped."
GOES_ON_THROUGH_RESTART = (
    "The bot is restarting. This background run goes on meanwhile; its result will be "
    "posted here when it ends."
)
FOLLOWED_AFTER_RESTART = (
    "The bot restarted. The background run started here {ago} ago went on meanwhile: its "
    "output so far, and the rest as it comes, follow in the next message."
)
HISTORY_OUTPUT_CHARS = 2000


class Service(Protocol):
    """What background runs need of the conversation service."""

    posters: dict[str, Poster]
    turns: Turns
    agent: Agent
    quotas: Quotas | None


@dataclass(eq=False, slots=True)
class BackgroundRun:
    key: ConversationKey
    owner: str
    server: str
    """Where its sandbox time counts (the person's quotas per server)."""
    stop_key: str
    run: DetachedRun
    watching: asyncio.Task[None] | None = None
    run_id: str | None = None
    """The id its sandbox keeps it by, when it outlives the process (see the module)."""
    handed_over: bool = False
    """Left going for the next process: this one neither reports nor forgets it."""


@dataclass(slots=True)
class Hooks:
    """What one turn's runs ask of the background (`bot.agent.detach.Background`)."""

    runs: BackgroundRuns
    key: ConversationKey
    owner: str
    server: str
    max_s: float
    keep_running: asyncio.Event = field(default_factory=asyncio.Event)

    def refusal(self) -> str | None:
        return self.runs.refusal(self.owner, self.key)

    def busy(self) -> bool:
        # A run whose code has ended no longer holds the session, though its report may
        # still be on its way.
        return self.runs.busy(self.key.id, running_only=True)

    async def take(self, run: DetachedRun) -> None:
        await self.runs.take(self.key, self.owner, self.server, run)


class BackgroundRuns:
    def __init__(self, conversations: Service, max_s: float, per_person: int) -> None:
        self.conversations = conversations
        self.max_s = max_s
        self.per_person = per_person
        self.runs: dict[str, BackgroundRun] = {}
        """By the key of their Stop control."""
        self.store: BackgroundStore | None = None
        """Where runs that outlive the process are kept (None: a shutdown stops them)."""
        self._following: set[asyncio.Task[None]] = set()
        self._closed = False

    def hooks(self, key: ConversationKey, owner: str, server: str) -> Hooks | None:
        """A turn's way to the background; None where runs cannot go there (turned off, or a
        platform that cannot post later)."""
        if self.max_s <= 0 or key.platform not in self.conversations.posters:
            return None
        return Hooks(self, key, owner, server, self.max_s)

    def refusal(self, owner: str, key: ConversationKey) -> str | None:
        if key.platform not in self.conversations.posters:
            return "Runs cannot go on in the background here."
        if not self.conversations.turns.accepting:
            return "The bot is shutting down."
        mine = sum(1 for r in self.runs.values() if r.owner == owner)
        if mine >= self.per_person:
            return (
                f"You have {mine} runs in the background already, the most one person may "
                "have (CELLMATE_BACKGROUND_RUNS_PER_PERSON)."
            )
        return None

    def busy(self, conversation: str, running_only: bool = False) -> bool:
        """Whether a background run of the conversation is going on (or, unless
        `running_only`, has ended and is still being reported)."""
        return any(
            r.run.conversation == conversation and not (running_only and r.run.task.done())
            for r in self.runs.values()
        )

    def get(self, stop_key: str) -> BackgroundRun | None:
        return self.runs.get(stop_key)

    @property
    def outlive_restarts(self) -> bool:
        """Whether runs in the background go on through a restart of the bot."""
        return self.store is not None and self.conversations.agent.executor.keeps_sessions

    async def take(self, key: ConversationKey, owner: str, server: str, run: DetachedRun) -> None:
        stop_key = secrets.token_hex(8)
        entry = BackgroundRun(key, owner, server, stop_key, run)
        self.runs[stop_key] = entry
        log.info("a run in %s went to the background", key.id)
        await self._keep(entry)
        await self._show(entry)

    async def _keep(self, entry: BackgroundRun) -> None:
        """Where it can, the run is kept past this process, and stored to be found again."""
        if self.store is None or not self.outlive_restarts:
            return
        run = entry.run
        try:
            await self.conversations.agent.executor.session(run.conversation).keep(run.run_id)
            started = time.time() - (time.monotonic() - run.started)
            self.store.add(
                StoredRun(
                    entry.stop_key,
                    entry.key.id,
                    entry.owner,
                    entry.server,
                    run.code,
                    run.run_id,
                    started,
                    run.clock.limit_s,
                )
            )
            entry.run_id = run.run_id
        except Exception:  # it still runs in this process, as where nothing outlives it
            log.exception("could not keep the background run in %s", entry.key.id)
            entry.run_id = None

    async def _show(self, entry: BackgroundRun, before: str = "") -> None:
        """The run's message of its own in the thread, and the watch that reports its end."""
        key, run = entry.key, entry.run
        poster = self.conversations.posters[key.platform]
        try:
            if before:
                await poster.say(key, before)
            reply = await poster.reply_in(key, entry.owner)
            await reply.start(entry.stop_key)
            await call(reply, CodeStarted(run.code))
            await run.sink.send_to(reply)
        except Exception:
            # Nowhere to show it: the run still ends, and is reported as well as can be.
            log.exception("could not post the background run in %s", key.id)
            reply = _Nowhere()
            await run.sink.send_to(reply)
        entry.watching = asyncio.create_task(self._watch(entry, reply))

    async def _watch(self, entry: BackgroundRun, reply: Reply) -> None:
        run, key = entry.run, entry.key
        poster = self.conversations.posters.get(key.platform)
        try:
            try:
                raw = await run.task
            except Exception as exc:
                log.exception("background run in %s failed", key.id)
                await reply.failed(f"The background run failed: {exc}")
                return
            quotas = self.conversations.quotas
            if quotas is not None:  # its whole time counts, as a turn's run's does
                quotas.record(entry.owner, entry.server, raw.duration_ms / 1000)
            result, _ = await run.finish(raw, reply)
            await call(reply, Answer(""))  # the run's report is the whole answer
            await reply.finish(None, [])
            if poster is not None:
                await poster.say(
                    key,
                    f"{poster.mention(entry.owner)} your background run ended: "
                    f"{_ended(result)} Its output is in the message above.",
                    notify=entry.owner,
                )
            await self._remember(run, result)
        except Exception:
            log.exception("could not report the background run in %s", key.id)
        finally:
            if not entry.handed_over:
                self.runs.pop(entry.stop_key, None)
                if self.store is not None:
                    self.store.remove(entry.stop_key)
                if key.is_one_off:  # its turn left the session to it; it ends with the run
                    with contextlib.suppress(Exception):
                        await self.conversations.agent.reset(key.id)

    async def _remember(self, run: DetachedRun, result: ExecutionResult) -> None:
        """The model's history learns how the run ended, for the next turn."""
        output = (result.stdout or "")[-HISTORY_OUTPUT_CHARS:]
        note = (
            f"[A run went on in the background and has now ended: {result.status.value} after "
            f"{result.duration_ms / 1000:.0f} s. {result.message}".strip()
            + (f" Its last output:\n{output}" if output else "")
            + "]"
        )
        history = self.conversations.agent.history
        await history.append(run.conversation, [{"role": "assistant", "content": note}])

    def stop(self, stop_key: str) -> bool:
        entry = self.runs.get(stop_key)
        if entry is None:
            return False
        entry.run.stop.set()
        return True

    def follow_stored(self, platform: str) -> None:
        """Once a platform is up: the runs of its conversations that an earlier process left
        going are followed to their end (see the module)."""
        if self.store is None or not self.outlive_restarts:
            return
        for stored in self.store.of_platform(platform):
            if stored.stop_key in self.runs:
                continue
            task = asyncio.create_task(self._follow(stored))
            self._following.add(task)
            task.add_done_callback(self._following.discard)

    async def _follow(self, stored: StoredRun) -> None:
        key = ConversationKey.parse(stored.conversation_key)
        elapsed = max(0.0, time.time() - stored.started)
        stop = asyncio.Event()
        run = self.conversations.agent.followed(
            key.id, stored.code, stored.run_id, max(1.0, stored.max_s - elapsed), stop
        )
        run.started = time.monotonic() - elapsed
        entry = BackgroundRun(key, stored.owner, stored.server, stored.stop_key, run)
        entry.run_id = stored.run_id
        self.runs[stored.stop_key] = entry
        log.info("following the background run in %s again after a restart", key.id)
        await self._show(entry, FOLLOWED_AFTER_RESTART.format(ago=_ago(elapsed)))

    async def close(self, grace_s: float = 10.0) -> None:
        """On shutdown: every background run is stopped, and its thread told why; one that
        outlives the process is left going instead, and its thread told so. Once: the bot
        closes them while its platforms can still post, and again on its way out."""
        if self._closed:
            return
        self._closed = True
        for task in list(self._following):
            task.cancel()
        outliving = self.outlive_restarts
        for entry in list(self.runs.values()):
            poster = self.conversations.posters.get(entry.key.platform)
            said = STOPPED_FOR_SHUTDOWN
            if outliving and entry.run_id is not None:
                entry.handed_over = True
                said = GOES_ON_THROUGH_RESTART
                # This process lets go of it (its sandbox is left running, its record kept);
                # cancelling the watch does not interrupt the code.
                entry.run.task.cancel()
                if entry.watching is not None:
                    entry.watching.cancel()
            else:
                entry.run.stop.set()
            if poster is not None:
                with contextlib.suppress(Exception):
                    await poster.say(entry.key, said)
        watching = [e.watching for e in self.runs.values() if e.watching is not None]
        if watching:
            await asyncio.wait(watching, timeout=grace_s)
        for task in watching:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _ago(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _ended(result: ExecutionResult) -> str:
    seconds = result.duration_ms / 1000
    if result.status is Status.OK:
        return f"it finished in {seconds:.0f} s."
    return f"{result.status.value} after {seconds:.0f} s ({result.message or 'no reason given'})."


class _Nowhere:
    """A reply that shows nothing (the platform could not take the background run's)."""

    async def queued(self, stop: str, text: str) -> None:
        return None

    async def start(self, stop: str) -> None:
        return None

    def __call__(self, event: object) -> None:
        return None

    async def finish(self, rerun: str | None, notices: object) -> None:
        return None

    async def refused(self, text: str) -> None:
        return None

    async def failed(self, text: str) -> None:
        return None
