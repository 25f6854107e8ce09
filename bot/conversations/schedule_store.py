"""Schedules in the bot's database (`schedules.sqlite3` on SQLite): what runs, where,
when it is next due, whether its code was approved, and what its last run showed (for the
next run's "what changed"). They survive restarts: the scheduler reads them at start."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from bot.database import Databases, Migrations, open_store

MIGRATIONS = Migrations(
    "schedules",
    "schedules",
    (
        """
        CREATE TABLE IF NOT EXISTS schedules (
            id {id},
            conversation TEXT NOT NULL,
            owner TEXT NOT NULL,
            server TEXT NOT NULL,
            words TEXT NOT NULL,
            cron TEXT NOT NULL,
            zone TEXT NOT NULL,
            cells TEXT NOT NULL,
            approved TEXT NOT NULL DEFAULT '',
            approved_by TEXT NOT NULL DEFAULT '',
            created {real} NOT NULL,
            next_due {real} NOT NULL,
            last_run {real} NOT NULL DEFAULT 0,
            last_text TEXT NOT NULL DEFAULT '',
            last_images TEXT NOT NULL DEFAULT '[]',
            runs {int} NOT NULL DEFAULT 0
        );
        CREATE INDEX IF NOT EXISTS schedules_due ON schedules (next_due);
        CREATE INDEX IF NOT EXISTS schedules_conversation ON schedules (conversation);
        """,
    ),
)
COLUMNS = (
    "id, conversation, owner, server, words, cron, zone, cells, approved, approved_by, "
    "created, next_due, last_run, last_text, last_images, runs"
)


def code_digest(cells: list[str]) -> str:
    """What an approval is of: the cells, exactly."""
    return hashlib.sha256(json.dumps(cells).encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Schedule:
    id: int
    conversation: str
    owner: str
    server: str
    words: str
    """The time as its owner typed it, to show."""
    cron: str
    zone: str
    cells: list[str]
    approved: str = ""
    """The digest of the cells an approver consented to ('' none)."""
    approved_by: str = ""
    created: float = 0.0
    next_due: float = 0.0
    last_run: float = 0.0
    last_text: str = ""
    last_images: list[tuple[str, str]] = field(default_factory=list)
    """(name, link) of the charts its last run showed."""
    runs: int = 0

    @property
    def code(self) -> str:
        return "\n\n".join(self.cells)

    @property
    def approved_now(self) -> bool:
        return self.approved == code_digest(self.cells)


class ScheduleStore:
    def __init__(self, where: Databases) -> None:
        self._db = open_store(where, MIGRATIONS)

    def close(self) -> None:
        self._db.close()

    def add(
        self,
        conversation: str,
        owner: str,
        server: str,
        words: str,
        cron: str,
        zone: str,
        cells: list[str],
        created: float,
        next_due: float,
        approved_by: str = "",
    ) -> Schedule:
        approved = code_digest(cells) if approved_by else ""
        row = self._db.execute(
            "INSERT INTO schedules (conversation, owner, server, words, cron, zone, cells, "
            "approved, approved_by, created, next_due) VALUES (?,?,?,?,?,?,?,?,?,?,?) "
            "RETURNING id",
            (
                conversation,
                owner,
                server,
                words,
                cron,
                zone,
                json.dumps(cells),
                approved,
                approved_by,
                created,
                next_due,
            ),
        ).one()
        assert row is not None
        found = self.get(int(row[0]))
        assert found is not None
        return found

    def get(self, number: int) -> Schedule | None:
        row = self._db.execute(
            f"SELECT {COLUMNS} FROM schedules WHERE id = ?",  # noqa: S608 (fixed columns)
            (number,),
        ).one()
        return None if row is None else _schedule(row)

    def of_conversation(self, conversation: str) -> list[Schedule]:
        return self._select("WHERE conversation = ? ORDER BY id", (conversation,))

    def of_owner(self, owner: str) -> list[Schedule]:
        return self._select("WHERE owner = ? ORDER BY id", (owner,))

    def due(self, moment: float) -> list[Schedule]:
        return self._select("WHERE next_due <= ? ORDER BY next_due, id", (moment,))

    def next_due(self) -> float | None:
        row = self._db.execute("SELECT MIN(next_due) FROM schedules").one()
        return None if row is None or row[0] is None else float(row[0])

    def claim_due(self, number: int, was: float, next_due: float) -> bool:
        """Move a schedule on from the due time `was` to `next_due`, unless another process
        sharing the database moved it first: True for the one process that runs it then."""
        row = self._db.execute(
            "UPDATE schedules SET next_due = ? WHERE id = ? AND next_due = ? RETURNING id",
            (next_due, number, was),
        ).one()
        return row is not None

    def set_cells(self, number: int, cells: list[str]) -> None:
        """New code: any earlier approval no longer covers it (its digest differs)."""
        self._write("UPDATE schedules SET cells = ? WHERE id = ?", (json.dumps(cells), number))

    def approve(self, number: int, cells: list[str], by: str) -> None:
        self._write(
            "UPDATE schedules SET approved = ?, approved_by = ? WHERE id = ?",
            (code_digest(cells), by, number),
        )

    def ran(self, number: int, moment: float, text: str, images: list[tuple[str, str]]) -> None:
        self._write(
            "UPDATE schedules SET last_run = ?, last_text = ?, last_images = ?, runs = runs + 1 "
            "WHERE id = ?",
            (moment, text, json.dumps(images), number),
        )

    def remove(self, number: int) -> None:
        self._write("DELETE FROM schedules WHERE id = ?", (number,))

    def _select(self, where: str, args: tuple[object, ...]) -> list[Schedule]:
        # Only this module's fixed clauses; values go as parameters.
        query = f"SELECT {COLUMNS} FROM schedules {where}"  # noqa: S608
        rows = self._db.execute(query, args).rows
        return [_schedule(row) for row in rows]

    def _write(self, statement: str, args: tuple[object, ...]) -> None:
        self._db.execute(statement, args)


def _schedule(row: tuple[object, ...]) -> Schedule:
    (
        number,
        conversation,
        owner,
        server,
        words,
        cron,
        zone,
        cells,
        approved,
        approved_by,
        created,
        next_due,
        last_run,
        last_text,
        last_images,
        runs,
    ) = row
    return Schedule(
        id=int(str(number)),
        conversation=str(conversation),
        owner=str(owner),
        server=str(server),
        words=str(words),
        cron=str(cron),
        zone=str(zone),
        cells=[str(cell) for cell in json.loads(str(cells))],
        approved=str(approved),
        approved_by=str(approved_by),
        created=float(str(created)),
        next_due=float(str(next_due)),
        last_run=float(str(last_run)),
        last_text=str(last_text),
        last_images=[(str(n), str(link)) for n, link in json.loads(str(last_images))],
        runs=int(str(runs)),
    )
