"""The agent: one turn of a conversation, from the person's message to one answer.

    loop.py ──> llm.py (the model client and its replies)
       │   ──> prompt.py (the system prompt, the `python` tool, trimmed results)
       │          └──> chart_text.py (a chart's numbers, in a few lines)
       │   ──> context.py ──> history.py, tokens.py (what of the history the model sees)
       └────> run_outputs.py (what a run produced, as artifacts to publish)

It knows nothing of chat platforms or of who may do what: the conversation layer
(`bot.conversations`) admits a turn and hands it here.
"""

from bot.agent.loop import Agent, AgentLimits, UserMessage
from bot.agent.turn import Turn

__all__ = ["Agent", "AgentLimits", "Turn", "UserMessage"]
