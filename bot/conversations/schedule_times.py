"""When a schedule runs: the words people type (`every monday 09:00 Europe/Berlin`, `daily`,
`hourly`, or a standard five-field cron line) turned into a cron line and a time zone, and
the times that follow, computed by croniter in that zone (daylight saving included).

    hourly [at :MM]                      0 * * * *   (minute MM)
    daily [at HH:MM] [ZONE]              M H * * *   (09:00 unless given)
    every day|weekday|DAY[s] [at HH:MM] [ZONE]
    every hour
    cron M H DOM MON DOW [ZONE]          or the five fields alone
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, croniter

DAYS = {
    "monday": 1,
    "tuesday": 2,
    "wednesday": 3,
    "thursday": 4,
    "friday": 5,
    "saturday": 6,
    "sunday": 0,
}
SHORT_DAYS = {name[:3]: number for name, number in DAYS.items()}
CLOCK = re.compile(r"^(\d{1,2}):(\d{2})$")
MINUTE = re.compile(r"^:(\d{2})$")
ZONE_NAME = re.compile(r"^(UTC|GMT|[A-Za-z][A-Za-z_+-]*(/[A-Za-z0-9_+-]+)+)$")
USAGE = (
    "Say when: `every monday 09:00 Europe/Berlin`, `daily 18:30`, `every weekday 08:00 UTC`, "
    "`hourly`, or a cron line such as `cron 0 9 * * 1-5 America/New_York`."
)


class BadTime(ValueError):
    """The words do not name a time; the message says what is wrong, for the person."""


@dataclass(frozen=True, slots=True)
class When:
    cron: str
    """Five fields, minute first, read in `zone`."""
    zone: str
    """An IANA zone name (`Europe/Berlin`, `UTC`)."""

    def next_after(self, moment: datetime) -> datetime:
        """The first time strictly after `moment`, in UTC."""
        local = moment.astimezone(ZoneInfo(self.zone))
        following: datetime = croniter(self.cron, local).get_next(datetime)
        return following.astimezone(UTC)

    def shortest_gap(self, start: datetime) -> timedelta:
        """The shortest gap between runs over the next few dozen (how often it really runs)."""
        times = [self.next_after(start)]
        for _ in range(48):
            times.append(self.next_after(times[-1]))
        return min(b - a for a, b in itertools.pairwise(times))

    @property
    def text(self) -> str:
        return f"{self.cron} ({self.zone})"


def parse_when(words: str, default_zone: str = "UTC") -> When:
    """The time the words name; raises BadTime saying why not."""
    parts = words.split()
    if not parts:
        raise BadTime(USAGE)
    zone = default_zone
    if len(parts) > 1 and ZONE_NAME.match(parts[-1]):
        zone = _zone(parts.pop())
    else:
        _zone(zone)
    head, rest = parts[0].lower(), parts[1:]
    if head == "cron" or (len(parts) == 5 and head not in ("every", "daily", "hourly")):
        fields = rest if head == "cron" else parts
        return When(_cron(" ".join(fields)), zone)
    if head == "hourly" or (head == "every" and [w.lower() for w in rest] == ["hour"]):
        minute = 0
        if head == "hourly" and rest:
            minute = _minute(rest)
        return When(f"{minute} * * * *", zone)
    if head == "daily":
        hour, minute = _clock(rest)
        return When(f"{minute} {hour} * * *", zone)
    if head == "every" and rest:
        day, clock = rest[0].lower(), rest[1:]
        hour, minute = _clock(clock)
        if day == "day":
            return When(f"{minute} {hour} * * *", zone)
        if day in ("weekday", "weekdays"):
            return When(f"{minute} {hour} * * 1-5", zone)
        number = _day(day)
        return When(f"{minute} {hour} * * {number}", zone)
    raise BadTime(USAGE)


def _zone(name: str) -> str:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise BadTime(
            f"{name!r} is not a time zone I know: use a name such as Europe/Berlin or UTC."
        ) from None
    return name


def _clock(words: list[str]) -> tuple[int, int]:
    if not words:
        return 9, 0
    words = [w for w in words if w.lower() != "at"]
    found = CLOCK.match(words[0]) if len(words) == 1 else None
    if found is None:
        raise BadTime(f"{' '.join(words)!r} is not a time of day: write it as 09:00. {USAGE}")
    hour, minute = int(found[1]), int(found[2])
    if hour > 23 or minute > 59:
        raise BadTime(f"{words[0]} is not a time of day: hours go to 23, minutes to 59.")
    return hour, minute


def _minute(words: list[str]) -> int:
    words = [w for w in words if w.lower() != "at"]
    found = MINUTE.match(words[0]) if len(words) == 1 else None
    if found is None or int(found[1]) > 59:
        raise BadTime(f"{' '.join(words)!r} is not a minute of the hour: write `hourly at :15`.")
    return int(found[1])


def _day(word: str) -> int:
    name = word.rstrip("s") if word.endswith("days") else word
    if name in DAYS:
        return DAYS[name]
    if name[:3] in SHORT_DAYS and len(name) == 3:
        return SHORT_DAYS[name[:3]]
    raise BadTime(f"{word!r} is not a day of the week. {USAGE}")


def _cron(line: str) -> str:
    if len(line.split()) != 5:
        raise BadTime(f"A cron line has five fields (minute hour day month weekday). {USAGE}")
    try:
        valid = croniter.is_valid(line)
    except CroniterBadCronError:
        valid = False
    if not valid:
        raise BadTime(f"{line!r} is not a cron line croniter accepts. {USAGE}")
    return line
