"""Cellmate's chat side, in rooms that depend downwards only:

    ops/            the `cellmate` command, serving, wiring, doctor, images, health
      │
    platforms/      Discord, Slack and the console: translate events, render turns
      │
    conversations/  who may do what, each person's line of turns, policies, approvals
      │
    agent/          one turn: the model, the prompt, the history it sees, the runs

Beside them, used from every room: `settings.py` (the only reader of the environment),
`errors.py` (the refusals a person sees), `events.py` (a turn's event stream), `fences.py`
(code in chat messages), `text.py` and `terminal.py` (words and safe text), `logs.py`,
`metrics.py`, `database.py` and `workspaces.py` (saved sandbox workspaces).
"""
