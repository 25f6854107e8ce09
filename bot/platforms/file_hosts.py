"""Where a chat platform's attached files may be downloaded from (the bot's token may go
with the request, so the list is short and explicit)."""

from __future__ import annotations

from collections.abc import Sequence

import yarl


def file_hosts(configured: Sequence[str], platform: Sequence[str], api_url: str) -> tuple[str, ...]:
    """The configured hosts, else the platform's own file hosts (and a custom API's own
    server, which serves the files it hands out)."""
    if configured:
        return tuple(configured)
    extra = (str(yarl.URL(api_url).origin()),) if api_url else ()
    return (*platform, *extra)
