"""The network grants of each channel and conversation, kept in the bot's database beside
the channel's /policy (on SQLite, the same file), and the traffic the egress proxy reports,
for /usage.

    CELLMATE_NETWORK=off        sandboxes have no network; /network grants nothing
    CELLMATE_NETWORK=allowlist  sandboxes reach, through the proxy, what `Grants` open:
      operator   CELLMATE_NETWORK_ALLOWED (comma-separated patterns), everywhere
      channel    `/network allow HOST channel`, until `/network deny HOST`
      once       `/network allow HOST once` or the card's Allow once: the conversation's
                 next run (a grant made during a run also lasts through that run)

A one-run grant is consumed by the end of the first run that starts after it was given:
`begin_run` marks what a starting run holds and `end_run` removes what it held.
"""

from __future__ import annotations

import time
import typing
from dataclasses import dataclass, field

from bot.conversations.keys import ConversationKey
from bot.conversations.policy import Scope
from bot.database import Databases, Migrations, open_store
from executor.network_grants import (
    DEFAULT_PORTS,
    Grant,
    Grants,
    HostPattern,
    Layer,
    parse_pattern,
    parse_private,
    patterns,
)

DAY = 86400.0
MIGRATIONS = Migrations(
    "network",
    "policies",
    (
        """
        CREATE TABLE IF NOT EXISTS network_grants (
            platform TEXT NOT NULL,
            workspace TEXT NOT NULL,
            channel TEXT NOT NULL,
            conversation TEXT NOT NULL,
            host TEXT NOT NULL,
            wildcard {int} NOT NULL,
            ports TEXT NOT NULL,
            by TEXT NOT NULL,
            at {real} NOT NULL,
            in_run {int} NOT NULL DEFAULT 0,
            PRIMARY KEY (platform, workspace, channel, conversation, host, wildcard, ports)
        );
        CREATE TABLE IF NOT EXISTS network_traffic (
            conversation TEXT NOT NULL,
            workspace TEXT NOT NULL,
            host TEXT NOT NULL,
            port {int} NOT NULL,
            verdict TEXT NOT NULL,
            requests {int} NOT NULL,
            bytes {int} NOT NULL,
            at {real} NOT NULL
        );
        CREATE INDEX IF NOT EXISTS network_traffic_at ON network_traffic (at);
        """,
    ),
)
CHANNEL = ""
"""The conversation column of a channel's grant (one-run grants name their conversation)."""
Verdict = typing.Literal["allowed", "refused"]


@dataclass(frozen=True, slots=True)
class NetworkSettings:
    """`CELLMATE_NETWORK` and `CELLMATE_NETWORK_<FIELD>`."""

    mode: typing.Literal["off", "allowlist"] = "off"
    """off: no network at all (as before doors existed); allowlist: the egress proxy opens
    what the grants name."""
    allowed: tuple[str, ...] = ()
    """Host patterns open to every conversation (e.g. pypi.org, files.pythonhosted.org)."""
    private_allowed: tuple[str, ...] = ()
    """Private HOST:PORTs (an on-prem database) that grants may name."""
    secrets_file: str = ""
    """A JSON file of headers the egress proxy adds for a host (see egressproxy.secrets);
    read by the proxy only. Empty: no secrets, and no TLS is terminated."""
    upstream_ca: str = ""
    """A PEM file of CA certificates the proxy verifies hosts with, besides the usual ones
    (an internal API's own CA)."""
    control_listen: str = ""
    """HOST:PORT where the bot waits for an egress proxy that runs on its own beside the
    engine (Docker Compose's `egress-proxy`) to connect; empty: the bot starts the proxy."""
    control_token_file: str = ""
    """The token that proxy shows when it connects (a file both mount)..."""
    control_token: str = field(default="", repr=False)
    """...or the token itself (Compose passes it to both from .env)."""
    operator: tuple[HostPattern, ...] = field(init=False, default=())
    private: frozenset[tuple[str, int]] = field(init=False, default=frozenset())

    def __post_init__(self) -> None:
        if self.mode not in ("off", "allowlist"):
            raise ValueError("CELLMATE_NETWORK must be off or allowlist")
        # Raises a PatternError (a ValueError) naming the first bad entry.
        private = parse_private(self.private_allowed)
        object.__setattr__(self, "private", private)
        object.__setattr__(self, "operator", patterns(self.allowed, private))

    @property
    def on(self) -> bool:
        return self.mode == "allowlist"


@dataclass(frozen=True, slots=True)
class Traffic:
    host: str
    port: int
    verdict: str
    requests: int
    bytes: int


class NetworkGrants:
    """Channel and one-run grants, and reported traffic, beside the policies."""

    def __init__(self, where: Databases, settings: NetworkSettings) -> None:
        self.settings = settings
        self._db = open_store(where, MIGRATIONS)
        # A run that held one-run grants when the process ended is over.
        self._db.execute("DELETE FROM network_grants WHERE in_run = 1")

    def close(self) -> None:
        self._db.close()

    def grants(self, key: ConversationKey) -> Grants:
        """What is open to the conversation `key`: the operator's, its channel's, its own."""
        found = [Grant(pattern, Layer.OPERATOR) for pattern in self.settings.operator]
        if not self.settings.on:
            return Grants(key.id, (), self.settings.private)
        scope = Scope.channel_of(key)
        rows = self._db.execute(
            "SELECT conversation, host, wildcard, ports, by FROM network_grants "
            "WHERE platform = ? AND workspace = ? AND channel = ? AND conversation IN (?, ?) "
            "ORDER BY conversation, at",
            (scope.platform, scope.workspace, scope.channel, CHANNEL, key.id),
        ).rows
        for conversation, host, wildcard, ports, by in rows:
            pattern = HostPattern(str(host), bool(wildcard), _ports(str(ports)))
            layer = Layer.CHANNEL if conversation == CHANNEL else Layer.ONCE
            found.append(Grant(pattern, layer, str(by)))
        return Grants(key.id, tuple(found), self.settings.private)

    def parse(self, text: str) -> HostPattern:
        """A pattern a person typed; raises a `PatternError` saying what is wrong."""
        return parse_pattern(text, self.settings.private)

    def allow(self, key: ConversationKey, pattern: HostPattern, once: bool, by: str) -> None:
        scope = Scope.channel_of(key)
        # A grant given again is new: it no longer belongs to the run that held it before.
        self._db.execute(
            "INSERT INTO network_grants (platform, workspace, channel, conversation, host, "
            "wildcard, ports, by, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (platform, workspace, channel, conversation, host, wildcard, ports) "
            "DO UPDATE SET by = excluded.by, at = excluded.at, in_run = 0",
            (
                scope.platform,
                scope.workspace,
                scope.channel,
                key.id if once else CHANNEL,
                pattern.host,
                int(pattern.wildcard),
                _ports_text(pattern.ports),
                by,
                time.time(),
            ),
        )

    def deny(self, key: ConversationKey, pattern: HostPattern) -> int:
        """Close `pattern`'s host (every port) to the channel and the conversation; how many
        grants that removed."""
        scope = Scope.channel_of(key)
        return self._db.execute(
            "DELETE FROM network_grants WHERE platform = ? AND workspace = ? AND channel = ? "
            "AND conversation IN (?, ?) AND host = ? AND wildcard = ?",
            (
                scope.platform,
                scope.workspace,
                scope.channel,
                CHANNEL,
                key.id,
                pattern.host,
                int(pattern.wildcard),
            ),
        ).rowcount

    def begin_run(self, key: ConversationKey) -> None:
        """A run of the conversation starts: it holds the one-run grants given so far."""
        self._db.execute("UPDATE network_grants SET in_run = 1 WHERE conversation = ?", (key.id,))

    def end_run(self, key: ConversationKey) -> None:
        """The run ended: the one-run grants it held are used up."""
        self._db.execute(
            "DELETE FROM network_grants WHERE conversation = ? AND in_run = 1", (key.id,)
        )

    def record(
        self,
        key: ConversationKey,
        host: str,
        port: int,
        verdict: Verdict,
        requests: int = 1,
        sent: int = 0,
        now: float | None = None,
    ) -> None:
        """Traffic the proxy saw for a conversation: `requests` to host:port, `sent` bytes
        both ways, allowed or refused."""
        if verdict not in ("allowed", "refused"):
            raise ValueError(f"unknown verdict {verdict!r}")
        now = time.time() if now is None else now
        with self._db.transaction() as session:
            session.execute(
                "INSERT INTO network_traffic (conversation, workspace, host, port, verdict, "
                "requests, bytes, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (key.id, key.workspace, host, port, verdict, requests, sent, now),
            )
            session.execute("DELETE FROM network_traffic WHERE at < ?", (now - 2 * DAY,))

    def traffic(
        self, server: str | None, limit: int = 10, now: float | None = None
    ) -> list[Traffic]:
        """The last day's traffic by host, port and verdict (of one server, or of all),
        the most requests first."""
        since = (time.time() if now is None else now) - DAY
        query = (
            "SELECT host, port, verdict, SUM(requests), SUM(bytes) FROM network_traffic "
            "WHERE at >= ?"
        )
        args: tuple[object, ...] = (since,)
        if server is not None:
            query += " AND workspace = ?"
            args += (server,)
        query += " GROUP BY host, port, verdict ORDER BY SUM(requests) DESC, host LIMIT ?"
        rows = self._db.execute(query, (*args, limit)).rows
        return [Traffic(str(h), int(p), str(v), int(r), int(b or 0)) for h, p, v, r, b in rows]


def _ports_text(ports: frozenset[int]) -> str:
    return ",".join(str(port) for port in sorted(ports))


def _ports(text: str) -> frozenset[int]:
    found = frozenset(int(part) for part in text.split(",") if part)
    return found or DEFAULT_PORTS


@dataclass(frozen=True, slots=True)
class NetworkCommand:
    """`/network` as typed: list (no host), allow HOST [once|channel], or deny HOST."""

    action: typing.Literal["list", "allow", "deny"] = "list"
    host: str = ""
    once: bool = False


def parse_network(text: str) -> NetworkCommand | None:
    """`/network` typed as text; None for anything else, which deserves the usage."""
    words = text.split()
    if not words or words == ["list"]:
        return NetworkCommand()
    action, *rest = words
    if action == "allow" and len(rest) in (1, 2):
        scope = rest[1].lower() if len(rest) == 2 else "channel"
        if scope not in ("once", "channel"):
            return None
        return NetworkCommand("allow", rest[0], once=scope == "once")
    if action == "deny" and len(rest) == 1:
        return NetworkCommand("deny", rest[0])
    return None
