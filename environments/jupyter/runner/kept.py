"""A run's events, kept so that a host that attached again can take the run over (`Keep`,
`Follow`): every run is recorded while it goes on, and the record is dropped when it ends
unless the host asked to keep it (it went on in the background, and the host may restart
before it ends). A kept record lasts until the next run."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from executor import wire


@dataclass(slots=True)
class RunRecord:
    id: str
    started: float = field(default_factory=time.monotonic)
    events: list[wire.Output | wire.Done] = field(default_factory=list)
    kept: bool = False

    def note(self, event: wire.Event) -> None:
        if isinstance(event, wire.Output | wire.Done) and event.id == self.id:
            self.events.append(event)

    @property
    def ended(self) -> bool:
        return any(isinstance(event, wire.Done) for event in self.events)

    def following(self) -> wire.Following:
        elapsed = round((time.monotonic() - self.started) * 1000)
        return wire.Following(id=self.id, found=True, elapsed_ms=elapsed)
