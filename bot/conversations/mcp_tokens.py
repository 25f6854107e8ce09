"""MCP tokens: each lets a person's coding agent act in one conversation as that person (see
`bot.mcp`). They are kept in the bot's database (`mcp_tokens.sqlite3` on SQLite), only as
their sha256; a token itself is shown once, to its person.

`/mcp` in a conversation: a token for the person's coding agent, bound to this conversation
and this person (`/mcp token`), their tokens (`/mcp`), and revoking them (`/mcp revoke [N]`).
The answers are for the person alone: a front end shows them privately."""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass

from bot.conversations.keys import ConversationKey
from bot.database import Databases, Migrations, open_store

# "user" is quoted: a reserved word in PostgreSQL (the current role's name).
MIGRATIONS = Migrations(
    "mcp_tokens",
    "mcp_tokens",
    (
        """
        CREATE TABLE IF NOT EXISTS mcp_tokens (
            id {id},
            digest TEXT NOT NULL UNIQUE,
            "user" TEXT NOT NULL,
            name TEXT NOT NULL,
            conversation TEXT NOT NULL,
            server TEXT NOT NULL,
            created {real} NOT NULL,
            revoked {real} NOT NULL DEFAULT 0
        );
        CREATE INDEX IF NOT EXISTS mcp_tokens_user ON mcp_tokens ("user");
        """,
    ),
)
COLUMNS = 'id, "user", name, conversation, server, created, revoked'
PREFIX = "cm_"
"""Tokens start with this, so a leaked one is recognisable."""


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Grant:
    """What a token lets its holder do: act as `user` in `conversation`."""

    id: int
    user: str
    name: str
    """How the thread names the person ("run by NAME's agent")."""
    conversation: str
    server: str
    """The Discord guild or Slack workspace, for quotas."""
    created: float
    revoked: float = 0.0


class TokenStore:
    def __init__(self, where: Databases) -> None:
        self._db = open_store(where, MIGRATIONS)

    def close(self) -> None:
        self._db.close()

    def issue(self, user: str, name: str, conversation: str, server: str = "") -> tuple[str, Grant]:
        """A new token for `user` in `conversation`, and its grant."""
        token = PREFIX + secrets.token_urlsafe(32)
        created = time.time()
        row = self._db.execute(
            'INSERT INTO mcp_tokens (digest, "user", name, conversation, server, created) '
            "VALUES (?,?,?,?,?,?) RETURNING id",
            (digest(token), user, name, conversation, server, created),
        ).one()
        assert row is not None
        return token, Grant(int(row[0]), user, name, conversation, server, created)

    def find(self, token: str) -> Grant | None:
        """The grant of `token`, revoked or not; None for a token never issued."""
        row = self._db.execute(
            f"SELECT {COLUMNS} FROM mcp_tokens WHERE digest = ?",  # noqa: S608
            (digest(token),),
        ).one()
        return None if row is None else Grant(*row)

    def of(self, user: str) -> list[Grant]:
        """The person's tokens that still work, oldest first."""
        rows = self._db.execute(
            f'SELECT {COLUMNS} FROM mcp_tokens WHERE "user" = ? AND revoked = 0 '  # noqa: S608
            "ORDER BY id",
            (user,),
        ).rows
        return [Grant(*row) for row in rows]

    def live(self) -> int:
        """How many tokens work (not revoked), everyone's."""
        row = self._db.execute("SELECT count(*) FROM mcp_tokens WHERE revoked = 0").one()
        return 0 if row is None else int(row[0])

    def revoke(self, user: str, number: int | None = None) -> int:
        """Revoke the person's tokens (or only token `number`); how many were revoked."""
        query = 'UPDATE mcp_tokens SET revoked = ? WHERE "user" = ? AND revoked = 0'
        values: tuple[object, ...] = (time.time(), user)
        if number is not None:
            query += " AND id = ?"
            values = (*values, number)
        return self._db.execute(query, values).rowcount


@dataclass(frozen=True, slots=True)
class McpDesk:
    """What a front end needs for `/mcp`: where tokens are kept, and the endpoint's address."""

    tokens: TokenStore
    url: str


USAGE = "Use /mcp token (a token for your coding agent here), /mcp, or /mcp revoke [N]."
NO_CONVERSATION = (
    "A token is for one conversation: use /mcp token in a thread with me (after your "
    "message there) or in our DM."
)
OFF = "The MCP endpoint is off here (CELLMATE_MCP=off)."


def mcp_command(
    desk: McpDesk | None,
    user: str,
    name: str,
    key: ConversationKey | None,
    server: str,
    text: str,
) -> str:
    """The answer to `/mcp TEXT` typed by `user` (shown as `name`) in conversation `key`
    (None: not in one); `desk` None: the endpoint is off."""
    if desk is None:
        return OFF
    tokens, url = desk.tokens, desk.url
    words = text.split()
    if not words:
        mine = tokens.of(user)
        if not mine:
            return "You have no MCP tokens. /mcp token makes one for this conversation."
        lines = ["Your MCP tokens:"]
        for grant in mine:
            made = time.strftime("%Y-%m-%d %H:%M", time.gmtime(grant.created))
            lines.append(f"{grant.id}. {grant.conversation} (made {made} UTC)")
        lines.append("/mcp revoke N revokes one; /mcp revoke revokes them all.")
        return "\n".join(lines)
    if words[0] == "token" and len(words) == 1:
        if key is None:
            return NO_CONVERSATION
        if key.is_one_off:
            return "A token is for a conversation: ask in a thread or a DM, not for a one-off run."
        token, grant = tokens.issue(user, name, key.id, server)
        return (
            f"MCP token {grant.id} for this conversation (shown once; it acts as you here):\n"
            f"{token}\n"
            f"Endpoint: {url}\n"
            "Give it to your agent as 'Authorization: Bearer <token>', or run `cellmate mcp` "
            "with CELLMATE_MCP_TOKEN set. /mcp revoke revokes it."
        )
    if words[0] == "revoke" and len(words) <= 2:
        number: int | None = None
        if len(words) == 2:
            if not words[1].isdigit():
                return USAGE
            number = int(words[1])
        count = tokens.revoke(user, number)
        if number is not None:
            return f"Revoked token {number}." if count else f"You have no token {number}."
        return f"Revoked {count} token{'s' if count != 1 else ''}."
    return USAGE
