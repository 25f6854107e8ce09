"""The refusals a person sees: why a turn, a command or a button press does not go ahead.

Each is raised where the decision is made (admission, the line of turns, quotas, shutdown)
and shown by whichever front end the person uses, as its message, which says why and, where
it can, when to try again.

    Exception
     └── Refused          a turn or an action may not start
          ├── NotHere     the place or the person is not on the front end's allowlist
          ├── NotYours    the person may not act on that conversation
          ├── Busy        the person has too many requests waiting
          ├── QuotaExceeded
          │               a usage limit is reached
          └── Draining    the process is shutting down and takes no new turns
"""

from __future__ import annotations

NOT_HERE = "Cellmate is not enabled here."
NOT_YOURS = "Only the people taking part in this conversation, or a moderator, can do that."
DRAINING = "Cellmate is restarting and takes no new requests; try again in a minute."


class Refused(Exception):
    """A turn may not start; the message says why (and when to try again), for the user."""


class NotHere(Refused):
    """The place or person is not on the front end's allowlist."""

    def __init__(self) -> None:
        super().__init__(NOT_HERE)


class NotYours(Refused):
    """The person may not act on that conversation."""

    def __init__(self) -> None:
        super().__init__(NOT_YOURS)


class Busy(Refused):
    """The person has too many requests waiting."""


class QuotaExceeded(Refused):
    """A limit is reached; the message says which, and when to try again."""


class Draining(Refused):
    """The process is shutting down and takes no new turns."""

    def __init__(self) -> None:
        super().__init__(DRAINING)
