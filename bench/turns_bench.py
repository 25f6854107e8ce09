"""What users feel on Slack and Discord:
`python -m bench turns [--runtime runsc] [--samples N] [--pool-size N]`.

The bot of `cellmate serve` (the same services, no model: fenced code runs directly) talks
to the stand-in Slack (HTTP mode) and Discord servers of bench/standins on loopback through
the real slack_bolt and discord.py clients. Each sample's code prints a token of its own;
a figure is the time from the event's arrival (the signed POST to /slack/events, or the
gateway dispatch; timed as the stand-in sends it) to the first platform API call whose
message carries that token (chat.postMessage / chat.update; a message created or edited on
Discord), as the stand-in receives it:

* a follow-up in a thread whose session is warm;
* the first message of a new thread (a new conversation: a sandbox from the warm pool);
* `/run` (a one-off session, also from the pool);
* the acknowledgement: Slack's HTTP 200 of the event request; for a Discord interaction
  its callback; for a Discord message the bot's first REST call (named in the printout);
* a coding agent's `run_code` round trip over stdio through `cellmate mcp`, on a warm
  session (bench/mcp_bench.py);
* on Slack, the model's first words: from the scripted model (bench/standins) writing the
  first fragment of its answer to the first call that shows it, streamed
  (`chat.startStream`) and, with CELLMATE_SLACK_STREAM off, edited into the progress
  message (`chat.update`, paced).

Samples run one at a time, each after the previous turn ended, the servers went quiet and
the pool refilled. The servers share the bot's event loop (and the machine's cores), as
every stand-in test does. Prints the machine, the settings and a table of median and p95
(milliseconds), and as its last line one JSON object (Slack's figures under the plain
names, Discord's prefixed `discord_`).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import json
import secrets
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any, Literal, cast

import discord
import openai
import yarl
from aiohttp import web

from bench.executor_bench import Figures, machine, percentile
from bench.mcp_bench import measure_mcp
from bench.standins import discord_server as dc
from bench.standins import slack_server as sl
from bench.standins.openai_server import Reply, ScriptedModel
from bench.turn_samples import (
    QUIET_S,
    SAMPLE_TIMEOUT_S,
    WARM_UP,
    Samples,
    Watch,
    sample_all,
    settle,
)
from bot.agent import Agent
from bot.conversations import Conversations
from bot.conversations.quotas import QuotaSettings
from bot.ops.http import start_server
from bot.ops.services import services
from bot.platforms.on_discord import build_client, run_discord
from bot.platforms.on_slack import EVENTS_PATH, add_http_route, build_slack
from bot.platforms.on_slack.streaming import START_BURST, START_PER_MINUTE
from bot.settings import (
    DiscordSettings,
    ModelSettings,
    Settings,
    SlackSettings,
    load_settings,
)
from executor import Executor

Runtime = Literal["runc", "runsc"]
INSTANCE = "bench-turns"
# ── Slack ─────────────────────────────────────────────────────────────────


SHOWN = ("chat.postMessage", "chat.update", "chat.startStream", "chat.appendStream")
"""The calls whose arguments show text."""


@contextlib.asynccontextmanager
async def slack_bot(
    conversations: Conversations, watch: Watch, stream: bool = True
) -> AsyncIterator[sl.SlackServer]:
    """The Slack front end in HTTP mode on its own aiohttp server, and Slack's stand-in (a
    workspace with the streaming methods)."""
    server = sl.SlackServer(mode="http")
    server.streaming = True
    await server.start()
    runner: web.AppRunner | None = None
    try:
        settings = SlackSettings(
            bot_token=sl.BOT_TOKEN,
            signing_secret=sl.SIGNING_SECRET,
            api_url=server.api_url,
            cooldown_s=0,
            stream=stream,
        )
        slack = build_slack(conversations, settings)
        await slack.connect()
        app = web.Application()
        add_http_route(slack, app)
        runner = await start_server(app, "127.0.0.1", 0)
        server.bot_url = f"http://127.0.0.1:{runner.addresses[0][1]}{EVENTS_PATH}"

        def seen(method: str, args: dict[str, Any]) -> None:
            watch.call(method)
            if method in SHOWN:
                watch.text(json.dumps(args, default=str))

        server.call_hooks.append(seen)
        yield server
    finally:
        if runner is not None:
            await runner.cleanup()
        await server.close()


def acked(deliveries: list[sl.Delivery]) -> float:
    """When Slack had its HTTP 200 for every request of an event (raising otherwise)."""
    at = time.perf_counter()
    refused = [d for d in deliveries if d.status != 200]
    if refused:
        raise SystemExit(f"the bot refused a Slack event: {refused[0].status} {refused[0].body}")
    return at


async def measure_slack(
    conversations: Conversations,
    executor: Executor,
    samples: int,
    found: Samples,
    quiet_s: float = QUIET_S,
) -> None:
    watch = Watch(quiet_s)
    async with slack_bot(conversations, watch) as server:
        roots: list[str] = []

        async def new_thread(code: str) -> float:
            asked, deliveries = await server.post(
                sl.C_GENERAL, f"```\n{code}\n```", mention_bot=True
            )
            at = acked(deliveries)
            roots.append(asked.ts)
            return at

        async def follow_up(code: str) -> float:
            _, deliveries = await server.post(sl.C_GENERAL, f"```\n{code}\n```", thread_ts=roots[0])
            return acked(deliveries)

        async def run_command(code: str) -> float:
            return acked([await server.slash("/run", code)])

        acts = {"new_thread": new_thread, "follow_up": follow_up, "run_command": run_command}
        await sample_all(acts, samples, watch, found, conversations, executor)


ANSWER_WORDS = 40
ANSWER_PIECES = 20
PIECE_DELAY_S = 0.02
"""The scripted model writes its answer in this many fragments this far apart."""


async def measure_first_words(
    agent: Agent, executor: Executor, samples: int, quiet_s: float = QUIET_S
) -> dict[str, list[float]]:
    """Milliseconds from the model's first fragment to the first Slack call that shows it,
    streamed ("streamed") and edited into the progress message ("edited"): mentions that
    the scripted model answers in words, on an agent like `agent` that asks it. Streamed
    samples keep to chat.startStream's tier (20 a minute) unless they fit its burst."""
    many = samples + WARM_UP > START_BURST
    spacing = 60 / START_PER_MINUTE if many else 0.0
    model = await ScriptedModel().start()
    client = openai.AsyncOpenAI(
        api_key="bench", base_url=model.base_url, max_retries=0, timeout=SAMPLE_TIMEOUT_S
    )
    writer = Agent(executor, agent.storage, agent.history, client=client, model="scripted-model")
    found: dict[str, list[float]] = {"streamed": [], "edited": []}
    try:
        for kind, stream in (("streamed", True), ("edited", False)):
            conversations = Conversations(writer)
            watch = Watch(quiet_s)
            async with slack_bot(conversations, watch, stream=stream) as server:
                next_at = 0.0
                for number in range(samples + WARM_UP):
                    await settle(conversations, executor, watch)
                    if stream:  # the tier's pace, not a wait for the bot
                        await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
                        next_at = time.perf_counter() + spacing
                    token = f"w{number}{secrets.token_hex(2)}"
                    words = " ".join(f"word{n}" for n in range(ANSWER_WORDS))
                    first: list[float] = []
                    model.piece_hooks[:] = [partial(_written, first)]
                    model.script(
                        Reply(
                            content=f"{token} {words}",
                            pieces=ANSWER_PIECES,
                            piece_delay_s=PIECE_DELAY_S,
                        )
                    )
                    carried = watch.expect(token)
                    await server.post(sl.C_GENERAL, f"question {number}", mention_bot=True)
                    async with asyncio.timeout(SAMPLE_TIMEOUT_S):
                        shown = await carried
                    if number >= WARM_UP:
                        found[kind].append((shown - first[0]) * 1000)
                await settle(conversations, executor, watch)
    finally:
        await client.close()
        await model.stop()
    return found


def _written(first: list[float], piece: str) -> None:
    first.append(time.perf_counter())


# ── Discord ───────────────────────────────────────────────────────────────


@contextlib.asynccontextmanager
async def discord_bot(
    conversations: Conversations, watch: Watch
) -> AsyncIterator[dc.DiscordServer]:
    """The Discord client connected to Discord's stand-in (gateway and REST)."""
    base, gateway = discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY
    server = dc.DiscordServer()
    await server.start()
    settings = DiscordSettings(token=dc.TOKEN, api_url=server.api_url, cooldown_s=0)
    client = build_client(conversations, settings)
    # discord.py waits this long after the last GUILD_CREATE before READY; the stand-in
    # sends its one guild at once.
    client._connection.guild_ready_timeout = 0.05
    task = asyncio.create_task(run_discord(client))
    try:
        await server.wait_ready()
        await asyncio.wait_for(client.connected.wait(), 30)

        def seen(method: str, route: str) -> None:
            watch.call(f"{method} {route_shape(route)}")

        def changed(message: dc.Message) -> None:
            if message.author_id == dc.BOT_ID:
                watch.text(json.dumps(message.raw, default=str))

        server.request_hooks.append(seen)
        server.message_hooks.append(changed)
        yield server
    finally:
        await client.close()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(task, 10)
        await server.close()
        discord.http.Route.BASE = base
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(str(gateway))


async def measure_discord(
    conversations: Conversations,
    executor: Executor,
    samples: int,
    found: Samples,
    quiet_s: float = QUIET_S,
) -> None:
    watch = Watch(quiet_s)
    async with discord_bot(conversations, watch) as server:
        threads: list[int] = []

        async def new_thread(code: str) -> None:
            asked = await server.post_message(
                dc.CHANNEL_GENERAL, f"```py\n{code}\n```", mention_bot=True
            )
            threads.append(asked.id)  # a thread started on a message has the message's id

        async def follow_up(code: str) -> None:
            # Without the message-content intent, a follow-up mentions the bot.
            await server.post_message(threads[0], f"```py\n{code}\n```", mention_bot=True)

        async def run_command(code: str) -> None:
            await server.slash("run", {"code": code})

        acts = {"new_thread": new_thread, "follow_up": follow_up, "run_command": run_command}
        await sample_all(acts, samples, watch, found, conversations, executor)


# ── figures ───────────────────────────────────────────────────────────────

TURNS = {
    "follow_up": "follow-up in a thread (warm session)",
    "new_thread": "first message of a new thread (pool)",
    "run_command": "/run (one-off session from the pool)",
}


ACKS = {"follow_up": "follow-up", "new_thread": "new thread", "run_command": "/run"}
FIRST_WORDS = {
    "streamed": "model's first words, streamed*",
    "edited": "model's first words, edited in (no stream)*",
}


async def measure(
    conversations: Conversations, executor: Executor, samples: int, quiet_s: float = QUIET_S
) -> Figures:
    """Every figure, Slack's then Discord's. The summary has Slack's under the plain names
    (`ack_*` over all its events), Discord's prefixed, and which call acked Discord's."""
    slack, disc = Samples(), Samples()
    await measure_slack(conversations, executor, samples, slack, quiet_s)
    first_words = await measure_first_words(conversations.agent, executor, samples, quiet_s)
    await measure_discord(conversations, executor, samples, disc, quiet_s)
    agent_runs = await measure_mcp(conversations, samples)
    figures = Figures()
    for platform, found, prefix in (("Slack", slack, ""), ("Discord", disc, "discord_")):
        for kind, what in TURNS.items():
            figures.add(f"{platform}: {what}", found.turns[kind], f"{prefix}turn_{kind}")
        for kind, what in ACKS.items():
            figures.add(f"{platform}: ack of a {what}", found.acks[kind], f"{prefix}ack_{kind}")
        every = [ms for kind in ACKS for ms in found.acks[kind]]
        figures.summary[f"{prefix}ack_p50_ms"] = round(statistics.median(every), 1)
        figures.summary[f"{prefix}ack_p95_ms"] = round(percentile(every, 0.95), 1)
    for kind, what in FIRST_WORDS.items():
        figures.add(f"Slack: {what}", first_words[kind], f"first_words_{kind}")
    figures.add("MCP: run_code round trip over stdio (warm session)", agent_runs, "mcp_run_code")
    figures.summary["discord_ack_calls"] = {kind: named(disc.ack_calls[kind]) for kind in ACKS}
    return figures


def route_shape(route: str) -> str:
    """A REST route without its ids and tokens: /channels/{id}/messages."""
    parts = ["{id}" if part.isdigit() else part for part in route.split("/")]
    if len(parts) > 3 and parts[1] in ("interactions", "webhooks"):
        parts[3] = "{token}"
    return "/".join(parts)


def named(calls: collections.Counter[str]) -> str:
    """The first calls seen, most common first, with their counts when there are several."""
    if len(calls) == 1:
        return next(iter(calls))
    return ", ".join(f"{call} x{count}" for call, count in calls.most_common())


def bench_settings(
    settings: Settings, data: Path, runtime: Runtime | None, pool_size: int | None
) -> Settings:
    """The operator's settings (limits, pool, image, backend), with no model and no quotas,
    local storage in `data` and an instance of its own."""
    sandbox = settings.sandbox
    if runtime:
        sandbox = dataclasses.replace(sandbox, runtime=runtime)
    pool = settings.pool
    if pool_size is not None:
        pool = dataclasses.replace(pool, size=pool_size)
    return dataclasses.replace(
        settings,
        sandbox=sandbox,
        pool=pool,
        model=ModelSettings(),
        quotas=QuotaSettings(),
        storage=dataclasses.replace(settings.storage, backend="local", public_base_url=""),
        data_dir=data,
        instance=INSTANCE,
    )


async def run(settings: Settings, samples: int) -> Figures:
    async with services(settings) as running:
        return await measure(running.conversations, running.agent.executor, samples)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench turns")
    parser.add_argument(
        "--runtime", choices=["runc", "runsc"], help="default: the settings' runtime"
    )
    parser.add_argument("--samples", type=int, default=20, help="samples per figure")
    parser.add_argument("--pool-size", type=int, help="default: CELLMATE_POOL_SIZE")
    args = parser.parse_args(argv)
    if args.samples < 2:
        parser.error("--samples must be at least 2")
    with tempfile.TemporaryDirectory() as data:
        settings = bench_settings(
            load_settings(), Path(data), cast(Runtime | None, args.runtime), args.pool_size
        )
        limits, pool = settings.sandbox, settings.pool
        print(f"machine: {machine()}")
        print(
            f"settings: runtime {limits.runtime}, memory {limits.memory_mb} MB, cpus "
            f"{limits.cpus}, pool {pool.size} ready (max_live {pool.max_live}), "
            f"{args.samples} samples (+{WARM_UP} warm-up) per figure, image {settings.image}, "
            f"backend {settings.executor_backend}, "
            f"workspaces {'on' if settings.workspace.enabled else 'off'}, no model"
        )
        figures = asyncio.run(run(settings, args.samples))
    summary = {**figures.summary, "runtime": limits.runtime, "pool_size": pool.size}
    summary["samples"] = args.samples
    print(f"{'figure, from the event arriving (ms)':52} {'p50':>9} {'p95':>9} {'n':>4}")
    for name, p50, p95, count in figures.rows:
        print(f"{name:52} {p50:9.1f} {p95:9.1f} {count:4}")
    print("turns: until the first chat.postMessage/chat.update or Discord message create/edit")
    print("  that shows the run's output")
    print("*: from the model's first fragment to the first chat.startStream (or chat.update)")
    print("  that shows it")
    print("MCP: from a coding agent's tools/call through `cellmate mcp` (stdio) to its result")
    print("acks: Slack's are the HTTP 200 of the event request(s); Discord's the bot's first")
    for kind, call in summary["discord_ack_calls"].items():
        print(f"  REST call after the dispatch, for a {ACKS[kind]}: {call}")
    print(json.dumps(summary))
    return 0
