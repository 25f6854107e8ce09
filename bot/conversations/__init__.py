"""Conversations: what every front end shares, written once.

    Discord / Slack / console event ──> Person, ConversationKey, Reply
                                          │
                       Conversations (service): admission (allowlist, quotas, draining),
                       each person's line (one turn at a time, later ones queued),
                       running turns (Stop, Re-run), reset, export, files,
                       each place's code policy, approvals and usage (moderation,
                       policy, approval), the people and doors (people, access),
                       the network's grants and closed-door cards (network, doors)
                                          │
                                        Agent ──> executor, storage

Front ends translate platform events into calls on `Conversations` and render the events
of a turn through their `Reply`; they decide nothing about who may do what (not who sees
/usage, nor what /policy means).
"""

from bot.conversations.access import AccessRules, Place
from bot.conversations.keys import ConversationKey
from bot.conversations.people import Admission, Person
from bot.conversations.reply import Reply
from bot.conversations.service import Conversations
from bot.errors import NotHere, NotYours, Refused

__all__ = [
    "AccessRules",
    "Admission",
    "ConversationKey",
    "Conversations",
    "NotHere",
    "NotYours",
    "Person",
    "Place",
    "Refused",
    "Reply",
]
