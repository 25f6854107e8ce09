"""The bot as the proxy's parent: owners asked, and requests told, over the proxy's own stdin
and stdout (`cellmate egress-proxy --parent`).

When the bot starts the proxy as its child, their talk needs no port and no credential: no
one else holds the pipes. One JSON object a line each way:

    proxy -> bot   {"ask": 7, "address": "172.30.0.5"}
    bot -> proxy   {"answer": 7, "owner": "console:::", "operator": ["pypi.org"],
                    "channel": ["*.example.com"], "once": ["api.example.org:8443"]}
                   {"answer": 7, "owner": null}            (no session has that sandbox)
    proxy -> bot   {"event": "egress", "owner": ..., "host": ..., "port": ..., "verdict":
                    "allowed" | "refused", "reason": ..., "bytes_up": ..., ...}   (audit.py)
    proxy -> bot   {"event": "listening", "host": ..., "port": ...}

An answer that does not come in time, or does not parse, refuses the request. The proxy
stops when its stdin ends: a proxy whose bot went has no one to ask.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from typing import Any, TextIO

from egressproxy.grants import BadDoor, Grants
from egressproxy.owners import _key, grants_from

log = logging.getLogger(__name__)

ASK_TIMEOUT_S = 5.0
LINE_LIMIT = 1 << 20


class ParentOwners:
    """`Owners` that asks the parent process; `read` feeds it the parent's answers."""

    def __init__(self, out: TextIO, timeout_s: float = ASK_TIMEOUT_S) -> None:
        self._out = out
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._asked = 0
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}

    def tell(self, message: dict[str, Any]) -> None:
        """One line to the parent (from the event loop or a logging handler)."""
        with self._lock:
            self._out.write(json.dumps(message, sort_keys=True) + "\n")
            self._out.flush()

    async def grants_for(self, address: str) -> Grants | None:
        self._asked += 1
        number = self._asked
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[number] = answer
        try:
            self.tell({"ask": number, "address": address})
            found = await asyncio.wait_for(answer, self._timeout_s)
        finally:
            self._waiting.pop(number, None)
        if found.get("owner") is None:
            return None
        entry = {k: found[k] for k in ("owner", "operator", "channel", "once") if k in found}
        return grants_from({address: entry})[_key(address)]

    def answered(self, line: bytes) -> None:
        """One line from the parent: the answer to a question still waiting, or nothing."""
        try:
            message = json.loads(line)
            number = message["answer"]
        except (ValueError, KeyError, TypeError):
            log.warning("ignored a line from the bot that is not an answer")
            return
        waiting = self._waiting.get(number) if isinstance(number, int) else None
        if waiting is not None and not waiting.done():
            waiting.set_result(message)

    async def read(self, reader: asyncio.StreamReader) -> None:
        """Feed answers until the parent's end of the pipe closes."""
        while line := await reader.readline():
            self.answered(line)


class TellParent(logging.Handler):
    """The audit log's lines (JSON already) as lines to the parent."""

    def __init__(self, owners: ParentOwners) -> None:
        super().__init__()
        self.owners = owners

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.owners.tell(json.loads(record.getMessage()))
        except (ValueError, OSError, BadDoor):
            self.handleError(record)


async def stdin_reader() -> asyncio.StreamReader:
    import sys

    reader = asyncio.StreamReader(limit=LINE_LIMIT)
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return reader
