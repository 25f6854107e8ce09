"""How often, and how far apart, a call that the engine may refuse for a moment is tried."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Backoff:
    """`attempts` tries: the first at once, each later one after a wait that grows by
    `factor` from `first_s`, never longer than `max_s`."""

    attempts: int
    first_s: float
    factor: float = 2.0
    max_s: float = 1.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("a backoff needs at least one attempt")

    def waits(self) -> Iterator[float]:
        """The wait before each attempt (0 before the first)."""
        wait = self.first_s
        for attempt in range(self.attempts):
            if attempt == 0:
                yield 0.0
                continue
            yield min(wait, self.max_s)
            wait *= self.factor

    @property
    def total_s(self) -> float:
        """The longest the attempts wait in all."""
        return sum(self.waits())
