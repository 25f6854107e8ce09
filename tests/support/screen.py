"""What the console printed, as tests read it: a terminal they can wait on."""

from __future__ import annotations

import asyncio
import io


class Screen(io.StringIO):
    """The console's output, with an event for tests that wait on it."""

    def __init__(self) -> None:
        super().__init__()
        self.changed = asyncio.Event()

    def write(self, text: str) -> int:
        self.changed.set()
        return super().write(text)

    async def wait_for(self, text: str, after: int = 0) -> int:
        """Wait until `text` is printed past position `after`; where it ends."""
        try:
            async with asyncio.timeout(20):
                while (found := self.getvalue().find(text, after)) < 0:
                    self.changed.clear()
                    await self.changed.wait()
        except TimeoutError:
            shown = self.getvalue()[after:]
            raise AssertionError(f"{text!r} not printed; after it: {shown!r}") from None
        return found + len(text)
