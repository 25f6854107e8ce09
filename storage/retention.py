"""Removing old artifacts: `cellmate storage prune --older-than 30d`, or on a schedule."""

from __future__ import annotations

import asyncio
import logging
import re
from datetime import UTC, datetime, timedelta

from storage.base import Storage
from storage.errors import StorageError

log = logging.getLogger(__name__)
UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def parse_age(text: str) -> timedelta:
    """`30d`, `12h`, `90m`, `45s` (or a combination such as `1d12h`)."""
    parts = re.fullmatch(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", text.strip().lower())
    if not text.strip() or parts is None:
        raise ValueError(f"{text!r} is not an age: write it like 30d, 12h, 90m or 1d12h")
    seconds = sum(
        int(value) * unit
        for value, unit in zip(parts.groups(), UNITS.values(), strict=True)
        if value
    )
    return timedelta(seconds=seconds)


async def prune(storage: Storage, older_than: timedelta, now: datetime | None = None) -> int:
    """Delete every artifact created more than `older_than` ago; return how many."""
    cutoff = (now or datetime.now(UTC)) - older_than
    removed = 0
    for item in await storage.list():
        created = item.created if item.created.tzinfo else item.created.replace(tzinfo=UTC)
        if created < cutoff:
            await storage.delete(item.key)
            removed += 1
    return removed


async def prune_periodically(
    storage: Storage, keep_days: int, every: timedelta = timedelta(hours=6)
) -> None:
    """Prune now and then every `every`, for as long as the bot runs; failures are logged."""
    while True:
        try:
            removed = await prune(storage, timedelta(days=keep_days))
            if removed:
                log.info("removed %d artifacts older than %d days", removed, keep_days)
        except StorageError as exc:
            log.warning("pruning old artifacts failed: %s", exc)
        await asyncio.sleep(every.total_seconds())
