"""Checks on each HTTP-mode request before Bolt sees it: a well-formed, signed, fresh
timestamp, and no request accepted twice.

Slack signs `v0:<timestamp>:<body>` and accepts requests up to five minutes old, so a request
captured on the way could be sent again within that window and would run again. Each signed
request is remembered until it is too old to be accepted anyway; a replay is acknowledged
and dropped. Slack's own retries are signed anew and pass here; Bolt's handlers drop them by
event id.
"""

from __future__ import annotations

import enum
import hmac
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping

from slack_sdk.signature import SignatureVerifier

from bot.conversations.shared_events import SharedEvents

MAX_AGE_S = 5 * 60
"""Slack's window: older (or further in the future) requests are refused."""
TIMESTAMP = re.compile(r"[0-9]{1,12}")


class Verdict(enum.Enum):
    ACCEPT = "accept"
    REPLAY = "replay"
    """Accepted before: acknowledged, not handled again."""
    BAD = "bad"
    """Unsigned, mis-signed, or with a missing, malformed or stale timestamp."""
    FULL = "full"
    """Too many requests to remember in the window: refused for now, Slack retries."""


class RequestCheck:
    def __init__(
        self,
        signing_secret: str,
        size: int = 100_000,
        clock: Callable[[], float] = time.time,
        shared: SharedEvents | None = None,
    ) -> None:
        self._verifier = SignatureVerifier(signing_secret)
        self._shared = shared
        """Requests any replica accepted (a replay may reach another replica)."""
        self._seen: OrderedDict[str, float] = OrderedDict()
        """Signature -> when it stops being accepted, oldest first."""
        self._size = size
        self._clock = clock

    def check(self, headers: Mapping[str, str], body: bytes) -> Verdict:
        """What to do with a request. An accepted request is remembered; `forget` it if
        handling it failed, so that Slack's retry of it is taken."""
        stamp = headers.get("X-Slack-Request-Timestamp", "")
        signature = headers.get("X-Slack-Signature", "")
        if not TIMESTAMP.fullmatch(stamp) or not signature:
            return Verdict.BAD
        now = self._clock()
        if abs(now - int(stamp)) > MAX_AGE_S:
            return Verdict.BAD
        try:
            expected = self._verifier.generate_signature(timestamp=stamp, body=body)
        except (UnicodeDecodeError, ValueError):
            return Verdict.BAD
        # As bytes: compare_digest refuses str with non-ASCII characters.
        given = signature.encode("utf-8", "replace")
        if expected is None or not hmac.compare_digest(expected.encode(), given):
            return Verdict.BAD
        self._expire(now)
        if signature in self._seen:
            return Verdict.REPLAY
        if len(self._seen) >= self._size:
            # Forgetting a request still inside the window would let its replay through.
            return Verdict.FULL
        self._seen[signature] = int(stamp) + MAX_AGE_S
        if self._shared is not None and not self._shared.first_time(_shared_key(signature)):
            return Verdict.REPLAY
        return Verdict.ACCEPT

    def forget(self, headers: Mapping[str, str]) -> None:
        signature = headers.get("X-Slack-Signature", "")
        self._seen.pop(signature, None)
        if self._shared is not None and signature:
            self._shared.forget(_shared_key(signature))

    def _expire(self, now: float) -> None:
        # Requests arrive in roughly timestamp order, so the expired ones are at the front;
        # one that is not is dropped a little later, never too early.
        while self._seen:
            signature, until = next(iter(self._seen.items()))
            if until >= now:
                return
            del self._seen[signature]


def _shared_key(signature: str) -> str:
    return f"slack-request:{signature}"
