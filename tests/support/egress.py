"""The egress proxy as the fake sandbox meets it, for the network tests: a cell `fetch('HOST')`
asks the grants of the conversation running it, as the proxy will; an open door prints what
was fetched, a closed one fails the cell and tells the conversation layer, which shows the
card. Nothing connects anywhere."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable

from bot.conversations import ConversationKey, Conversations
from bot.fences import only_code
from executor.fake_backend import FakeRun, stdout

FETCH = re.compile(r"fetch\('(?P<host>[^']+)'(?:, (?P<port>\d+))?\)")


def fetch(host: str, port: int = 443) -> str:
    """The code of a cell that fetches from `host:port`."""
    return f"fetch('{host}')" if port == 443 else f"fetch('{host}', {port})"


class Proxy:
    def __init__(self) -> None:
        self.conversations: Conversations | None = None
        self.refused: list[tuple[str, str, int]] = []
        """(conversation id, host, port) of every refused request."""
        self._cards: set[asyncio.Task[object]] = set()

    def script(
        self, fallback: Callable[[str], FakeRun | None] = lambda code: None
    ) -> Callable[[str], FakeRun | None]:
        def run(code: str) -> FakeRun | None:
            found = FETCH.fullmatch(code.strip())
            if found is None or self.conversations is None:
                return fallback(code)
            host, port = found["host"], int(found["port"] or 443)
            key = self._running(code)
            if key is None:  # the network is off: nothing was ever open
                return FakeRun(error=("ProxyError", "the network is off"))
            if self.conversations.network_grants(key).allows(host, port):
                return FakeRun(outputs=[stdout(f"fetched {host}:{port}\n")])
            self.refused.append((key.id, host, port))
            task = asyncio.get_running_loop().create_task(
                self.conversations.door_closed(key, host, port)
            )
            self._cards.add(task)
            task.add_done_callback(self._cards.discard)
            return FakeRun(error=("ProxyError", f"{host} is not open to this channel"))

        return run

    def _running(self, code: str) -> ConversationKey | None:
        """The conversation running `code` now: the one that started it last (None: runs are
        not watched, as while the network is off)."""
        assert self.conversations is not None
        runs = self.conversations.last_runs
        # A run in another language is remembered in its tagged block (`runnable_again`).
        found = next(
            (k for k in reversed(runs) if (only_code(runs[k]) or runs[k]).strip() == code.strip()),
            None,
        )
        return None if found is None else ConversationKey.parse(found)
