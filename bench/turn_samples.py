"""How `python -m bench turns` takes one sample: an event carrying code that prints a token
of its own, timed until a platform call shows that token (see bench/turns_bench.py), with
the bot settled (no turn running, the pool full, the stand-ins quiet) before each sample."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from functools import partial

from bot.conversations import Conversations
from executor import Executor

SAMPLE_TIMEOUT_S = 120.0
QUIET_S = 0.3
WARM_UP = 1
"""Samples of each kind run first and left out of the figures (first-call costs)."""


class Watch:
    """What the stand-in servers saw of the bot, timed as each call arrived."""

    def __init__(self, quiet_s: float) -> None:
        self.quiet_s = quiet_s
        """A sample starts once neither server has seen a call for this long."""
        self.last_call = 0.0
        self._token = ""
        self._carried: asyncio.Future[float] | None = None
        self._first: tuple[float, str] | None = None

    def expect(self, token: str) -> asyncio.Future[float]:
        """Start a sample: the future resolves when a call carries `token`."""
        self._token, self._first = token, None
        self._carried = asyncio.get_running_loop().create_future()
        return self._carried

    def call(self, what: str) -> None:
        now = time.perf_counter()
        self.last_call = now
        if self._token and self._first is None:
            self._first = (now, what)

    def text(self, text: str) -> None:
        carried = self._carried
        if carried is not None and not carried.done() and self._token in text:
            carried.set_result(time.perf_counter())

    @property
    def first_call(self) -> tuple[float, str]:
        if self._first is None:
            raise RuntimeError("the bot made no call")
        return self._first


@dataclasses.dataclass
class Samples:
    """Milliseconds per figure of one platform, and what its acks were."""

    turns: dict[str, list[float]] = dataclasses.field(
        default_factory=lambda: collections.defaultdict(list)
    )
    acks: dict[str, list[float]] = dataclasses.field(
        default_factory=lambda: collections.defaultdict(list)
    )
    ack_calls: dict[str, collections.Counter[str]] = dataclasses.field(
        default_factory=lambda: collections.defaultdict(collections.Counter)
    )


def code_printing(number: int) -> tuple[str, str]:
    """Code that prints a token of its own, and the token (which the code does not contain
    as such, so a message that shows the code does not count as one with its output)."""
    word, nonce = f"turn{number}", secrets.token_hex(4)
    return f"print({word!r}, {nonce!r})", f"{word} {nonce}"


async def settle(conversations: Conversations, executor: Executor, watch: Watch) -> None:
    """Wait until no turn runs, the pool is full and the servers have gone quiet."""
    async with asyncio.timeout(SAMPLE_TIMEOUT_S):
        while (  # noqa: ASYNC110 (polls turn, pool and call counters between samples)
            len(conversations.turns)
            or executor.pool.ready < executor.pool.size
            or time.perf_counter() - watch.last_call < watch.quiet_s
        ):
            await asyncio.sleep(0.05)


async def end_sessions(executor: Executor, keep: set[str]) -> None:
    """End the sessions a sample started, so that live sandboxes do not pile up."""
    for key in executor.sessions.active:
        if key not in keep:
            await executor.session(key).close()


Act = Callable[[str], Awaitable[float | None]]
"""Sends an event carrying the code; returns when Slack has its ack (perf_counter), or
None where the ack is the bot's first call."""


async def sample(
    kind: str,
    number: int,
    act: Act,
    watch: Watch,
    found: Samples,
    ready: Callable[[], Awaitable[None]],
) -> None:
    await ready()
    code, token = code_printing(number)
    carried = watch.expect(token)
    started = time.perf_counter()
    acked = await act(code)
    try:
        async with asyncio.timeout(SAMPLE_TIMEOUT_S):
            arrived = await carried
    except TimeoutError:
        raise SystemExit(
            f"no answer to a {kind} showed {token!r} within {SAMPLE_TIMEOUT_S:g} s"
        ) from None
    ack = "HTTP 200"
    if acked is None:
        acked, ack = watch.first_call
    if number >= WARM_UP:
        found.turns[kind].append((arrived - started) * 1000)
        found.acks[kind].append((acked - started) * 1000)
        found.ack_calls[kind][ack] += 1


async def sample_all(
    acts: Mapping[str, Act],
    samples: int,
    watch: Watch,
    found: Samples,
    conversations: Conversations,
    executor: Executor,
) -> None:
    """Each kind in turn: the first new thread's conversation is the warm one of the
    follow-ups; the sessions of later new threads and /run end after their sample."""
    ready = partial(settle, conversations, executor, watch)
    await sample("new_thread", 0, acts["new_thread"], watch, found, ready)
    keep = set(executor.sessions.active)
    for number in range(samples + WARM_UP):
        await sample("follow_up", number, acts["follow_up"], watch, found, ready)
    for kind in ("new_thread", "run_command"):
        first = WARM_UP if kind == "new_thread" else 0  # the warm conversation was one
        for number in range(first, samples + WARM_UP):
            await sample(kind, number, acts[kind], watch, found, ready)
            await end_sessions(executor, keep)
    await ready()
    await end_sessions(executor, set())
