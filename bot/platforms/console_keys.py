"""The console's keyboard in a terminal: lines read as they are typed, on the event loop.

A turn runs while its person may type: a line typed then is seen at once (so /keep, /beside
and /stop act on the running turn), while the turn's own questions (approve this code? the
code's `input()`) get the lines typed after they ask. The terminal's line discipline edits
the line (backspace, Ctrl-U) and sends it whole when Enter is pressed, as it did for
`input()`.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
from collections import deque
from collections.abc import Callable
from typing import TextIO

READ_BYTES = 65536


class Keyboard:
    """Lines from `fd` (a terminal, or a pipe in tests), each taken by one reader: a question
    (`ask`) first, else whoever waits for a line nobody asked for (`typed`)."""

    def __init__(self, fd: int, out: TextIO) -> None:
        self.fd = fd
        self.out = out
        self._lines: deque[str | None] = deque()
        """Whole lines not taken yet; None: the end of input (Ctrl-D in a terminal)."""
        self._partial = ""
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._changed = asyncio.Event()
        self._asking: list[str] = []
        """The prompts of the questions waiting for a line, oldest first."""
        self._ended = False
        """A pipe ended: every read from now on gets None."""
        self._listening = False
        self._prompted = False
        """A prompt is the last thing on the screen (nothing printed nor typed since)."""

    def listen(self) -> None:
        """Read lines as they come (until `pause`)."""
        if not self._listening and not self._ended:
            asyncio.get_running_loop().add_reader(self.fd, self._readable)
            self._listening = True

    def pause(self) -> None:
        """Leave the terminal to another reader (getpass) until `listen` again."""
        if self._listening:
            with contextlib.suppress(RuntimeError):  # the loop is closing
                asyncio.get_running_loop().remove_reader(self.fd)
            self._listening = False

    async def ask(self, prompt: str) -> str | None:
        """Show `prompt`; the next line typed (None at the end of input)."""
        self.out.write(prompt)
        self.out.flush()
        self._prompted = True
        self._asking.append(prompt)
        try:
            return await self._next(lambda: True)
        finally:
            self._asking.remove(prompt)
            self._changed.set()  # a line typed meanwhile may be nobody's question's now

    async def typed(self) -> str | None:
        """The next line typed while no question waits for one (None at the end of input)."""
        return await self._next(lambda: not self._asking)

    def prompt_again(self) -> None:
        """Show the waiting question's prompt again, after something printed over it."""
        if self._asking:
            self.out.write(self._asking[-1])
            self.out.flush()
            self._prompted = True

    def fresh_line(self) -> None:
        """Before printing what nobody typed for (a run in the background): leave the line
        of a prompt that waits for the person."""
        if self._prompted:
            self.out.write("\n")
            self._prompted = False

    async def _next(self, mine: Callable[[], bool]) -> str | None:
        while not ((self._lines or self._ended) and mine()):
            self._changed.clear()
            await self._changed.wait()
        return self._lines.popleft() if self._lines else None

    def _readable(self) -> None:
        try:
            data = os.read(self.fd, READ_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""  # the terminal went away: as the end of input
        self._prompted = False  # Enter took the cursor to a line of its own
        if data:
            *lines, self._partial = (self._partial + self._decoder.decode(data)).split("\n")
            self._lines.extend(line.removesuffix("\r") for line in lines)
        else:
            rest = self._partial + self._decoder.decode(b"", final=True)
            self._partial = ""
            if rest:
                self._lines.append(rest.removesuffix("\r"))
            self._lines.append(None)
            if not os.isatty(self.fd):  # a terminal reads on after Ctrl-D; a pipe has ended
                self.pause()
                self._ended = True
        self._changed.set()
