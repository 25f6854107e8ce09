"""HTTP/1.1 as the proxy speaks it: a strict reader for the client's request head, and the
writer of the requests it sends to the engine. One request per connection, in both directions.

Nothing of the client's head is forwarded: the engine sees a request line, a query and headers
that the proxy wrote itself, so there is no header to smuggle and no second request to pipeline.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode

from dockerproxy.errors import RequestRefused

MAX_HEAD = 64 * 1024
REQUEST_LINE = re.compile(r"(?P<method>GET|HEAD|POST|PUT|DELETE) (?P<target>/[!-~]*) HTTP/1\.[01]")
HEADER = re.compile(r"(?P<name>[!#$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*(?P<value>[ -~\t]*?)[ \t]*")
VERSIONED = re.compile(r"/v(?P<major>[0-9]{1,2})\.(?P<minor>[0-9]{1,3})(?P<path>/.*)")
PATH = re.compile(r"(/[A-Za-z0-9_.:@+=-]+)+")
REASONS = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    version: tuple[int, int] | None
    path: str
    """The path without its version prefix, exactly as sent (no percent-decoding)."""
    query: dict[str, str]
    length: int
    """The body's length; bodies are sized, never chunked."""


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    """The next request's head, or None when the client closed without sending one."""
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    except asyncio.LimitOverrunError:
        raise RequestRefused("the request head is too large") from None
    try:
        lines = raw[:-4].decode("ascii").split("\r\n")
    except UnicodeDecodeError:
        raise RequestRefused("the request head is not ASCII") from None
    line = REQUEST_LINE.fullmatch(lines[0])
    if not line:
        raise RequestRefused("the request line is not one the proxy reads")
    headers: dict[str, str] = {}
    for text in lines[1:]:
        header = HEADER.fullmatch(text)
        if not header:
            raise RequestRefused("a request header is malformed")
        name = header["name"].lower()
        if name in headers and name in ("content-length", "transfer-encoding", "host"):
            raise RequestRefused(f"the header {header['name']} appears twice")
        headers[name] = header["value"]
    if "transfer-encoding" in headers:
        raise RequestRefused(
            "chunked or encoded request bodies are not supported; send Content-Length"
        )
    length_text = headers.get("content-length", "0")
    if not length_text.isdigit() or len(length_text) > 12:
        raise RequestRefused("the Content-Length is not a number")
    target = line["target"]
    path, _, query_text = target.partition("?")
    if "#" in target or not PATH.fullmatch(path):
        raise RequestRefused("the path has characters the proxy does not accept")
    version = None
    versioned = VERSIONED.fullmatch(path)
    if versioned:
        version = (int(versioned["major"]), int(versioned["minor"]))
        path = versioned["path"]
    if ".." in path.split("/"):
        raise RequestRefused("paths may not contain ..")
    try:
        pairs = parse_qsl(query_text, keep_blank_values=True, strict_parsing=bool(query_text))
    except ValueError:
        raise RequestRefused("the query string is malformed") from None
    query: dict[str, str] = {}
    for key, value in pairs:
        if key in query:
            raise RequestRefused(f"the query parameter {key!r} appears twice")
        query[key] = value
    return Request(line["method"], version, path, query, int(length_text))


def request_head(
    method: str,
    path: str,
    query: dict[str, str],
    version: tuple[int, int] | None,
    *,
    content_type: str | None = None,
    length: int | None = None,
    chunked: bool = False,
    upgrade: bool = False,
) -> bytes:
    prefix = "" if version is None else f"/v{version[0]}.{version[1]}"
    target = prefix + path + (f"?{urlencode(query)}" if query else "")
    lines = [f"{method} {target} HTTP/1.1", "Host: docker"]
    if content_type:
        lines.append(f"Content-Type: {content_type}")
    if length is not None:
        lines.append(f"Content-Length: {length}")
    elif chunked:
        lines.append("Transfer-Encoding: chunked")
    lines += ["Connection: Upgrade", "Upgrade: tcp"] if upgrade else ["Connection: close"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")


async def read_response_head(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """The engine's status code and its whole response head."""
    raw = await reader.readuntil(b"\r\n\r\n")
    status_line = raw.split(b"\r\n", 1)[0].split(b" ")
    if len(status_line) < 2 or not status_line[1].isdigit():
        raise ConnectionError("the engine's answer is not HTTP")
    return int(status_line[1]), raw


async def answer(writer: asyncio.StreamWriter, status: int, body: object) -> None:
    payload = json.dumps(body).encode()
    writer.write(
        f"HTTP/1.1 {status} {REASONS.get(status, 'OK')}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
        + payload
    )
    await writer.drain()
