"""Usage limits per user and per server (Discord guild, Slack workspace): runs per hour and
sandbox-seconds per day, checked before each run starts, counted in the bot's database so
that they survive restarts. A limit of 0 means no limit."""

from __future__ import annotations

import time
from dataclasses import dataclass

from bot.database import Databases, Migrations, open_store
from bot.errors import QuotaExceeded
from bot.text import human_duration

HOUR = 3600.0
DAY = 86400.0
# "user" is quoted: a reserved word in PostgreSQL (the current role's name).
MIGRATIONS = Migrations(
    "quotas",
    "usage",
    (
        """
        CREATE TABLE IF NOT EXISTS runs (
            "user" TEXT NOT NULL,
            server TEXT NOT NULL,
            at {real} NOT NULL,
            seconds {real} NOT NULL
        );
        CREATE INDEX IF NOT EXISTS runs_by_user ON runs ("user", at);
        CREATE INDEX IF NOT EXISTS runs_by_server ON runs (server, at);
        """,
    ),
)


@dataclass(frozen=True, slots=True)
class QuotaSettings:
    user_runs_per_hour: int = 0
    user_sandbox_s_per_day: float = 0.0
    server_runs_per_hour: int = 0
    server_sandbox_s_per_day: float = 0.0

    def __post_init__(self) -> None:
        if min(self.user_runs_per_hour, self.server_runs_per_hour) < 0:
            raise ValueError("runs per hour must not be negative")
        if min(self.user_sandbox_s_per_day, self.server_sandbox_s_per_day) < 0:
            raise ValueError("sandbox seconds per day must not be negative")

    @property
    def enabled(self) -> bool:
        return any(
            (
                self.user_runs_per_hour,
                self.user_sandbox_s_per_day,
                self.server_runs_per_hour,
                self.server_sandbox_s_per_day,
            )
        )


@dataclass(frozen=True, slots=True)
class Usage:
    who: str
    runs: int
    seconds: float


class Quotas:
    def __init__(self, where: Databases, settings: QuotaSettings) -> None:
        self.settings = settings
        self._db = open_store(where, MIGRATIONS)

    def close(self) -> None:
        self._db.close()

    def check(self, user: str, server: str, now: float | None = None) -> None:
        """Raise `QuotaExceeded` if a run by `user` in `server` may not start now."""
        now = time.time() if now is None else now
        limits = self.settings
        for column, who, runs_limit, seconds_limit, whose in (
            ('"user"', user, limits.user_runs_per_hour, limits.user_sandbox_s_per_day, "your"),
            (
                "server",
                server,
                limits.server_runs_per_hour,
                limits.server_sandbox_s_per_day,
                "this server's",
            ),
        ):
            if not who:
                continue
            if runs_limit:
                times = self._times(column, who, now - HOUR)
                if len(times) >= runs_limit:
                    wait = times[len(times) - runs_limit] + HOUR - now
                    raise QuotaExceeded(
                        f"That would exceed {whose} limit of {runs_limit} runs per hour. "
                        f"Try again in {human_duration(wait)}."
                    )
            if seconds_limit:
                spent = self._spent(column, who, now - DAY)
                if sum(seconds for _, seconds in spent) >= seconds_limit:
                    wait = _until_below(spent, seconds_limit, now)
                    raise QuotaExceeded(
                        f"That would exceed {whose} limit of {seconds_limit:g} sandbox-seconds "
                        f"per day. Try again in {human_duration(wait)}."
                    )

    def record(self, user: str, server: str, seconds: float, now: float | None = None) -> None:
        with self._db.transaction() as session:
            session.execute(
                'INSERT INTO runs ("user", server, at, seconds) VALUES (?, ?, ?, ?)',
                (user, server, time.time() if now is None else now, seconds),
            )
            # Old rows never count again.
            session.execute("DELETE FROM runs WHERE at < ?", (time.time() - 2 * DAY,))

    def top(
        self, server: str | None = None, limit: int = 10, now: float | None = None
    ) -> list[Usage]:
        """The heaviest users of the last day (of one server, or of all)."""
        since = (time.time() if now is None else now) - DAY
        query = 'SELECT "user", COUNT(*), SUM(seconds) FROM runs WHERE at >= ?'
        args: tuple[object, ...] = (since,)
        if server is not None:
            query += " AND server = ?"
            args += (server,)
        query += ' GROUP BY "user" ORDER BY SUM(seconds) DESC, COUNT(*) DESC LIMIT ?'
        rows = self._db.execute(query, (*args, limit)).rows
        return [Usage(str(user), int(runs), float(seconds or 0)) for user, runs, seconds in rows]

    def report(self, server: str | None) -> str:
        """The day's heaviest users, as a message for admins."""
        top = self.top(server)
        if not top:
            return "Nobody has run code here in the last 24 hours."
        lines = ["Top users, last 24 hours (runs, sandbox-seconds):"]
        lines += [f"{i}. {u.who}: {u.runs} runs, {u.seconds:.0f} s" for i, u in enumerate(top, 1)]
        return "\n".join(lines)

    def _times(self, column: str, who: str, since: float) -> list[float]:
        rows = self._db.execute(
            f"SELECT at FROM runs WHERE {column} = ? AND at >= ? ORDER BY at",  # noqa: S608
            (who, since),
        ).rows
        return [float(at) for (at,) in rows]

    def _spent(self, column: str, who: str, since: float) -> list[tuple[float, float]]:
        rows = self._db.execute(
            f"SELECT at, seconds FROM runs WHERE {column} = ? AND at >= ? ORDER BY at",  # noqa: S608
            (who, since),
        ).rows
        return [(float(at), float(seconds)) for at, seconds in rows]


def _until_below(spent: list[tuple[float, float]], limit: float, now: float) -> float:
    """Seconds until enough of the day's runs leave the window to get below `limit`."""
    total = sum(seconds for _, seconds in spent)
    for at, seconds in spent:
        total -= seconds
        if total < limit:
            return at + DAY - now
    return DAY
