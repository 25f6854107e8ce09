"""A run's `input()` and `getpass()`: each request is put to the caller's `InputCallback`
while the run's clock stands still (a person typing is not the code running), and its
answer goes back to the runner."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from executor import wire
from executor.errors import SandboxError
from executor.models import InputAsked, InputExchange
from executor.runner_client import RunnerClient

log = logging.getLogger(__name__)

InputCallback = Callable[[InputAsked], Awaitable[str | None]]
"""Asks a person; their answer, or None when none came (the code's `input()` then raises
EOFError)."""


class RunClock:
    """A run's time against its limit, which stands still while the code waits for input.

    Its caller may raise the limit while the run goes on (a run sent to the background),
    and may be asked, when the limit is reached, whether to raise it instead of stopping
    the code (`on_limit`)."""

    def __init__(self, limit_s: float, on_limit: Callable[[], bool] | None = None) -> None:
        self.limit_s = limit_s
        self.on_limit = on_limit
        """Called once the limit is reached: True when it raised the limit (`extend`)."""
        self._started = time.monotonic()
        self._stood = 0.0
        self._since: float | None = None
        self._waits = 0
        self.changed = asyncio.Event()

    def start(self) -> None:
        """The code starts now (not when the clock was made: the run may have waited)."""
        self._started = time.monotonic()

    def extend(self, limit_s: float) -> None:
        """The run may now take `limit_s` in all, counted from its start."""
        self.limit_s = max(self.limit_s, limit_s)
        self.changed.set()

    def elapsed(self) -> float:
        stood = self._stood + (time.monotonic() - self._since if self._since is not None else 0)
        return time.monotonic() - self._started - stood

    def over(self) -> bool:
        """The limit is reached: unless `on_limit` raises it, the code is stopped."""
        return self.on_limit is None or not self.on_limit()

    def stop(self) -> None:
        self._waits += 1
        if self._since is None:
            self._since = time.monotonic()
            self.changed.set()

    def go(self) -> None:
        self._waits -= 1
        if self._waits == 0 and self._since is not None:
            self._stood += time.monotonic() - self._since
            self._since = None
            self.changed.set()

    def remaining(self) -> float | None:
        """Seconds left; None while the clock stands."""
        if self._since is not None:
            return None
        return self.limit_s - (time.monotonic() - self._started - self._stood)


class InputAsking:
    """The input requests of one run, each asked in a task of its own, so the run's output
    goes on being read meanwhile."""

    def __init__(
        self, client: RunnerClient, on_input: InputCallback | None, clock: RunClock
    ) -> None:
        self._client = client
        self._on_input = on_input
        self._clock = clock
        self._tasks: set[asyncio.Task[None]] = set()
        self.exchanges: list[InputExchange] = []
        self.secret_given = False

    def ask(self, request: wire.InputRequest) -> None:
        task = asyncio.create_task(self._ask(request))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _ask(self, request: wire.InputRequest) -> None:
        asked = InputAsked(prompt=request.prompt, password=request.password)
        answer: str | None = None
        self._clock.stop()
        try:
            if self._on_input is not None:
                answer = await self._on_input(asked)
        except Exception:
            log.exception("asking for the code's input failed")
        finally:
            self._clock.go()
        if answer is not None:
            answer = answer[: wire.MAX_INPUT_CHARS]
        self.secret_given |= request.password and answer is not None
        self.exchanges.append(
            InputExchange(
                prompt=request.prompt,
                password=request.password,
                answered=answer is not None,
                answer="" if request.password or answer is None else answer,
            )
        )
        with contextlib.suppress(SandboxError):
            await self._client.send(
                wire.InputReply(id=request.id, value=answer or "", given=answer is not None)
            )

    async def close(self) -> None:
        """The run ended: whoever is still asked need not answer."""
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
