"""Files that users attach in chat, checked before they go into a sandbox's /mnt/data.

Adapters hand over a name, a declared size and either the bytes or a URL to fetch them from
(with the platform's credentials). Each file is refused with a reason, or accepted under a
sanitised, unique name; nothing is fetched past its size cap.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

import aiohttp

from storage.names import unique_names

Fetcher = Callable[[str, int], Awaitable[bytes]]
"""Download a URL, refusing more than the given number of bytes (raise IntakeError)."""

TABULAR_SUFFIXES = (".csv", ".tsv", ".xlsx", ".json", ".jsonl", ".parquet")


class IntakeError(Exception):
    """One attachment could not be fetched; the message says why, for the user."""


@dataclass(frozen=True, slots=True)
class IncomingFile:
    name: str
    size: int | None = None
    data: bytes | None = None
    url: str | None = None


@dataclass(frozen=True, slots=True)
class IntakeLimits:
    max_bytes: int = 25_000_000
    max_count: int = 10
    max_total_bytes: int = 100_000_000


@dataclass(frozen=True, slots=True)
class Refused:
    name: str
    reason: str


@dataclass(slots=True)
class Intake:
    files: dict[str, bytes] = field(default_factory=dict)
    """Accepted files by their name in /mnt/data."""
    renamed: dict[str, str] = field(default_factory=dict)
    """Original name -> name in /mnt/data, where they differ."""
    refused: list[Refused] = field(default_factory=list)

    @property
    def tabular(self) -> list[str]:
        return [name for name in self.files if name.lower().endswith(TABULAR_SUFFIXES)]

    def message(self) -> str:
        """What to tell the user about refused or renamed files ('' when all went in as is)."""
        lines = [f"Not used: {r.name}: {r.reason}." for r in self.refused]
        lines += [
            f"{original} is in /mnt/data as {name}." for original, name in self.renamed.items()
        ]
        return "\n".join(lines)


async def receive(
    incoming: Sequence[IncomingFile],
    fetch: Fetcher | None = None,
    limits: IntakeLimits | None = None,
) -> Intake:
    limits = limits or IntakeLimits()
    result = Intake()
    names = unique_names([item.name for item in incoming])
    total = 0
    for index, (item, name) in enumerate(zip(incoming, names, strict=True)):
        shown = item.name[:80] or "(unnamed)"
        if index >= limits.max_count:
            result.refused.append(Refused(shown, f"at most {limits.max_count} files per message"))
            continue
        if item.size is not None and item.size > limits.max_bytes:
            result.refused.append(Refused(shown, f"larger than the {_mb(limits.max_bytes)} limit"))
            continue
        try:
            content = await _content(item, fetch, limits.max_bytes)
        except IntakeError as exc:
            result.refused.append(Refused(shown, str(exc)))
            continue
        if len(content) > limits.max_bytes:
            result.refused.append(Refused(shown, f"larger than the {_mb(limits.max_bytes)} limit"))
            continue
        if total + len(content) > limits.max_total_bytes:
            result.refused.append(
                Refused(shown, f"the files together exceed {_mb(limits.max_total_bytes)}")
            )
            continue
        total += len(content)
        result.files[name] = content
        if name != item.name:
            result.renamed[item.name] = name
    return result


async def _content(item: IncomingFile, fetch: Fetcher | None, max_bytes: int) -> bytes:
    if item.data is not None:
        return item.data
    if item.url is None:
        raise IntakeError("it has no content")
    if fetch is None:
        raise IntakeError("it cannot be downloaded here")
    return await fetch(item.url, max_bytes)


def http_fetcher(headers: Mapping[str, str] | None = None, timeout_s: float = 60.0) -> Fetcher:
    """A fetcher for platform file URLs (Slack needs its bot token in `headers`)."""

    async def fetch(url: str, max_bytes: int) -> bytes:
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as client,
                client.get(url, headers=dict(headers or {})) as response,
            ):
                if response.status != 200:
                    raise IntakeError(f"downloading it failed (HTTP {response.status})")
                content = bytearray()
                async for chunk in response.content.iter_chunked(65536):
                    content += chunk
                    if len(content) > max_bytes:
                        raise IntakeError(f"larger than the {_mb(max_bytes)} limit")
                return bytes(content)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise IntakeError(f"downloading it failed ({type(exc).__name__})") from exc

    return fetch


def _mb(size: int) -> str:
    return f"{size / 1e6:g} MB"
