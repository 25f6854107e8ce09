"""Links to stored files, as the tests sign and follow them."""

from __future__ import annotations

from dataclasses import dataclass

import aiohttp

SECRET = b"test-secret-for-links-0123456789"


@dataclass
class Fetched:
    status: int
    headers: dict[str, str]
    body: bytes


async def fetch(link: str) -> Fetched:
    async with aiohttp.ClientSession() as client, client.get(link) as response:
        return Fetched(response.status, dict(response.headers), await response.read())
