"""Files that users attach in chat, checked before they go into a sandbox's /mnt/data.

Adapters hand over a name, a declared size and either the bytes or a URL to fetch them from
(with the platform's credentials). Each file is refused with a reason, or accepted under a
sanitised, unique name; nothing is fetched past its size cap.

URLs come from event payloads, so they are not trusted: a file is fetched only from the
platform's own file hosts (exact scheme, host and port), and credentials go to those alone,
also when a redirect leads elsewhere.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import aiohttp
import yarl

from storage.names import unique_names

Fetcher = Callable[[str, int], Awaitable[bytes]]
"""Download a URL, refusing more than the given number of bytes (raise IntakeError)."""

TABULAR_SUFFIXES = (".csv", ".tsv", ".xlsx", ".json", ".jsonl", ".parquet")
MAX_REDIRECTS = 5
SLACK_FILE_HOSTS = ("files.slack.com",)
DISCORD_FILE_HOSTS = ("cdn.discordapp.com", "media.discordapp.net")

Origin = tuple[str, str, int]


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
class RefusedFile:
    name: str
    reason: str


@dataclass(slots=True)
class Intake:
    files: dict[str, bytes] = field(default_factory=dict)
    """Accepted files by their name in /mnt/data."""
    renamed: dict[str, str] = field(default_factory=dict)
    """Original name -> name in /mnt/data, where they differ."""
    refused: list[RefusedFile] = field(default_factory=list)

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
            result.refused.append(
                RefusedFile(shown, f"at most {limits.max_count} files per message")
            )
            continue
        if item.size is not None and item.size > limits.max_bytes:
            result.refused.append(
                RefusedFile(shown, f"larger than the {_mb(limits.max_bytes)} limit")
            )
            continue
        try:
            content = await _content(item, fetch, limits.max_bytes)
        except IntakeError as exc:
            result.refused.append(RefusedFile(shown, str(exc)))
            continue
        if len(content) > limits.max_bytes:
            result.refused.append(
                RefusedFile(shown, f"larger than the {_mb(limits.max_bytes)} limit")
            )
            continue
        if total + len(content) > limits.max_total_bytes:
            result.refused.append(
                RefusedFile(shown, f"the files together exceed {_mb(limits.max_total_bytes)}")
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


def file_hosts(entries: Iterable[str]) -> frozenset[Origin]:
    """Origins from setting values: a bare host means https on port 443; a URL (such as a
    test server's http://127.0.0.1:8123) names its scheme and port."""
    found: set[Origin] = set()
    for entry in entries:
        entry = entry.strip()
        if not entry:
            continue
        url = yarl.URL(entry if "://" in entry else f"https://{entry}")
        origin = _origin(url)
        if origin is None or url.user is not None or url.password is not None:
            raise ValueError(f"{entry!r} is not a host name or an http(s) origin")
        found.add(origin)
    return frozenset(found)


def _origin(url: yarl.URL) -> Origin | None:
    if url.scheme not in ("http", "https") or not url.host or url.port is None:
        return None
    return url.scheme, url.host.lower().rstrip("."), url.port


def _allowed(url: yarl.URL, hosts: frozenset[Origin]) -> bool:
    # userinfo is refused outright: `https://files.slack.com@evil.example/` names evil.example.
    return url.user is None and url.password is None and _origin(url) in hosts


def http_fetcher(
    hosts: Iterable[str],
    headers: Mapping[str, str] | None = None,
    timeout_s: float = 60.0,
    where: str = "the platform's file servers",
) -> Fetcher:
    """A fetcher for platform file URLs on `hosts` (see `file_hosts`); `headers` (Slack's
    bot token) go only to those hosts. A URL elsewhere is refused, naming `where`; a
    redirect to another host is followed without the headers."""
    allowed = file_hosts(hosts)

    async def fetch(url: str, max_bytes: int) -> bytes:
        try:
            target = yarl.URL(url)
        except ValueError:
            raise IntakeError("its address is not a valid URL") from None
        if not _allowed(target, allowed):
            raise IntakeError(f"it is not stored on {where} ({target.host or url[:60]})")
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        try:
            async with aiohttp.ClientSession(timeout=timeout) as client:
                return await _follow(client, target, allowed, dict(headers or {}), max_bytes)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise IntakeError(f"downloading it failed ({type(exc).__name__})") from exc

    return fetch


async def _follow(
    client: aiohttp.ClientSession,
    url: yarl.URL,
    allowed: frozenset[Origin],
    headers: dict[str, str],
    max_bytes: int,
) -> bytes:
    # Redirects are followed here, not by aiohttp, so that every hop is checked anew.
    for _ in range(MAX_REDIRECTS + 1):
        sent = headers if _allowed(url, allowed) else {}
        async with client.get(url, headers=sent, allow_redirects=False) as response:
            location = response.headers.get("Location")
            if response.status in (301, 302, 303, 307, 308) and location:
                url = url.join(yarl.URL(location))
                if url.scheme not in ("http", "https"):
                    raise IntakeError("downloading it failed (redirected to a non-web address)")
                continue
            if response.status != 200:
                raise IntakeError(f"downloading it failed (HTTP {response.status})")
            content = bytearray()
            async for chunk in response.content.iter_chunked(65536):
                content += chunk
                if len(content) > max_bytes:
                    raise IntakeError(f"larger than the {_mb(max_bytes)} limit")
            return bytes(content)
    raise IntakeError("downloading it failed (too many redirects)")


def _mb(size: int) -> str:
    return f"{size / 1e6:g} MB"
