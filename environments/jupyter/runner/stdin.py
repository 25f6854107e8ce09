"""The code's `input()` and `getpass()` during a run, answered by the host; and the secrets
that `getpass()` was given, kept out of everything the runner sends later."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from executor import wire

SECRET_MIN_CHARS = 3
"""Shorter answers to `getpass()` are not masked in outputs: masking a one-letter answer
would mask that letter everywhere."""
MASK = wire.MASKED
EOF = "\x04"
"""The reply that makes the kernel's `input()` raise EOFError (ipykernel's convention)."""
UNMASKED_PREFIXES = ("image/", "application/pdf")
"""Output data kept as it is: base64 bytes, where a match would be chance, and a change
would break the file."""


class Secrets:
    """Answers to `getpass()` in this sandbox, in memory only."""

    def __init__(self) -> None:
        self._known: list[str] = []

    def add(self, answer: str) -> None:
        if len(answer) >= SECRET_MIN_CHARS and answer not in self._known:
            self._known.append(answer)
            # The longest first, so that one secret inside another is masked whole.
            self._known.sort(key=len, reverse=True)

    def __bool__(self) -> bool:
        return bool(self._known)

    def hex(self) -> list[str]:
        """The secrets as hex (for a kernel script: no characters that could break it)."""
        return [secret.encode("utf-8").hex() for secret in self._known]

    def mask(self, value: Any, key: str = "") -> Any:
        """`value` (an output's content: strings in dicts and lists) with every secret
        replaced by MASK."""
        if not self._known or key.startswith(UNMASKED_PREFIXES):
            return value
        if isinstance(value, str):
            for secret in self._known:
                value = value.replace(secret, MASK)
            return value
        if isinstance(value, dict):
            return {k: self.mask(v, str(k)) for k, v in value.items()}
        if isinstance(value, list):
            return [self.mask(item) for item in value]
        return value


class InputRelay:
    """During one run: each input request of the kernel goes to the host as an
    `InputRequest`, and its `InputReply` goes back to the kernel."""

    def __init__(
        self, kernel_client: Any, emit: Callable[[wire.Event], None], secrets: Secrets
    ) -> None:
        self._kc = kernel_client
        self._emit = emit
        self._secrets = secrets
        self._run_id = ""
        self._waiting: asyncio.Future[wire.InputReply] | None = None
        self.asking: wire.InputRequest | None = None
        """The request the code waits on, to ask again a host that attached since."""

    async def relay(self, run_id: str) -> None:
        """Until cancelled (when the run ends)."""
        self._run_id = run_id
        try:
            while True:
                message = await self._kc.get_stdin_msg()
                if message.get("msg_type") != "input_request":
                    continue
                content = message.get("content", {})
                password = bool(content.get("password"))
                self._waiting = asyncio.get_running_loop().create_future()
                self.asking = wire.InputRequest(
                    id=run_id,
                    prompt=str(content.get("prompt", ""))[: wire.MAX_PROMPT_CHARS],
                    password=password,
                )
                self._emit(self.asking)
                reply = await self._waiting
                self._waiting = None
                self.asking = None
                if reply.given and password:
                    self._secrets.add(reply.value)
                self._kc.input(reply.value if reply.given else EOF)
        finally:
            self._waiting = None
            self.asking = None
            self._run_id = ""

    def answer(self, reply: wire.InputReply) -> None:
        """The host's reply, for the request the run waits on (any other is ignored)."""
        if self._waiting is not None and not self._waiting.done() and reply.id == self._run_id:
            self._waiting.set_result(reply)
