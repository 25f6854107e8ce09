"""Helpers for tests that drive the agent: one turn's events, its one ending, tool results."""

from __future__ import annotations

from typing import Any

from bot.agent import Agent, UserMessage
from bot.events import Answer, Failure, TurnEvent
from storage.intake import IncomingFile


async def turn(
    agent: Agent, conversation: str, text: str, attachments: list[IncomingFile] | None = None
) -> list[TurnEvent]:
    events: list[TurnEvent] = []
    await agent.turn(conversation, UserMessage(text, attachments or []), events.append)
    return events


def final(events: list[TurnEvent]) -> Answer | Failure:
    endings = [e for e in events if isinstance(e, Answer | Failure)]
    assert len(endings) == 1, endings  # exactly one answer per message
    assert endings[0] is events[-1]
    return endings[0]


def tool_messages(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]
