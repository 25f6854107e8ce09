"""What every front end shares: the agent, the running turns, quotas, metrics and admins."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from bot.agent import Agent
from bot.platforms.access import Gate, Refused
from bot.platforms.turns import Running, Turns


@dataclass
class Hub:
    agent: Agent
    turns: Turns = field(default_factory=Turns)
    admins: frozenset[str] = frozenset()
    """User ids (Discord or Slack) allowed to see /usage."""
    connected: dict[str, bool] = field(default_factory=dict)
    """Platform name -> whether its connection is up, for /healthz."""

    @contextmanager
    def starting(self, gate: Gate, owner: str, server: str, conversation: str) -> Iterator[Running]:
        """Admit one turn: the user's one turn at a time and cooldown, quotas, and not while
        shutting down; the owner takes part in the conversation from then on. Raises a
        `Refused` whose message is for the user."""
        try:
            with gate.turn(owner):
                if self.agent.quotas is not None:
                    self.agent.quotas.check(owner, server)
                gate.participants.add(conversation, owner)
                with self.turns.running(conversation, owner) as entry:
                    yield entry
        except Refused as exc:
            if self.agent.metrics is not None:
                self.agent.metrics.refused(type(exc).__name__)
            raise

    def usage(self, server: str | None) -> str:
        """The day's heaviest users, for admins."""
        quotas = self.agent.quotas
        if quotas is None:
            return "Usage is not recorded: no quotas are configured (CELLMATE_QUOTA_*)."
        top = quotas.top(server)
        if not top:
            return "Nobody has run code here in the last 24 hours."
        lines = ["Top users, last 24 hours (runs, sandbox-seconds):"]
        lines += [f"{i}. {u.who}: {u.runs} runs, {u.seconds:.0f} s" for i, u in enumerate(top, 1)]
        return "\n".join(lines)
