"""Schedule times as people type them, read into cron lines and zones (croniter computes the
times), and the note of what changed between two runs' outputs."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bot.conversations.schedule_changes import changes
from bot.conversations.schedule_times import BadTime, When, parse_when


@pytest.mark.parametrize(
    ("words", "cron", "zone"),
    [
        ("every monday 09:00 Europe/Berlin", "0 9 * * 1", "Europe/Berlin"),
        ("every Mondays at 7:05", "5 7 * * 1", "UTC"),
        ("every sun 23:59 Asia/Tokyo", "59 23 * * 0", "Asia/Tokyo"),
        ("every weekday 08:00", "0 8 * * 1-5", "UTC"),
        ("every day at 06:30 America/New_York", "30 6 * * *", "America/New_York"),
        ("daily", "0 9 * * *", "UTC"),
        ("daily 18:30 UTC", "30 18 * * *", "UTC"),
        ("hourly", "0 * * * *", "UTC"),
        ("hourly at :15", "15 * * * *", "UTC"),
        ("every hour", "0 * * * *", "UTC"),
        ("cron 0 9 * * 1-5 America/New_York", "0 9 * * 1-5", "America/New_York"),
        ("*/15 * * * *", "*/15 * * * *", "UTC"),
        ("0 9 * * */2 Asia/Tokyo", "0 9 * * */2", "Asia/Tokyo"),
    ],
)
def test_the_ways_to_say_when(words: str, cron: str, zone: str) -> None:
    assert parse_when(words) == When(cron, zone)


def test_a_time_without_a_zone_is_in_the_default_zone() -> None:
    assert parse_when("daily 10:00", "Europe/Berlin") == When("0 10 * * *", "Europe/Berlin")


@pytest.mark.parametrize(
    "words",
    [
        "",
        "weekly",
        "UTC",
        "every blursday 09:00",
        "every monday 9",
        "every monday 24:00",
        "daily 09:60",
        "daily at",
        "hourly at 15",
        "hourly at :75",
        "daily 09:00 Mars/Olympus",
        "cron 0 9 * *",
        "cron 61 * * * *",
        "cron 0 9 * * 8",
        "0 9 * * * * *",
        # What a person types is kept and shown at every run: words that would ping a
        # channel are not a time, so nothing is made from them.
        "daily 09:00 <!channel>",
        "every monday 09:00 @everyone",
        "cron 0 9 * * 1 <@U0123>",
    ],
)
def test_words_that_name_no_time_are_refused_saying_why(words: str) -> None:
    with pytest.raises(BadTime) as refused:
        parse_when(words)
    assert str(refused.value)


def test_times_follow_the_zone_across_daylight_saving() -> None:
    berlin = parse_when("daily 09:00 Europe/Berlin")
    before = berlin.next_after(datetime(2026, 3, 28, 12, 0, tzinfo=UTC))
    assert before == datetime(2026, 3, 29, 7, 0, tzinfo=UTC)  # 09:00 CEST
    winter = berlin.next_after(datetime(2026, 11, 26, 12, 0, tzinfo=UTC))
    assert winter == datetime(2026, 11, 27, 8, 0, tzinfo=UTC)  # 09:00 CET


def test_the_next_time_is_strictly_after() -> None:
    hourly = parse_when("hourly")
    at = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
    assert hourly.next_after(at) == datetime(2026, 11, 26, 13, 0, tzinfo=UTC)


def test_the_shortest_gap_is_how_often_it_really_runs() -> None:
    start = datetime(2026, 11, 26, tzinfo=UTC)
    assert parse_when("*/15 * * * *").shortest_gap(start).total_seconds() == 900
    assert parse_when("cron 0,5 9 * * *").shortest_gap(start).total_seconds() == 300


def test_changes_name_the_numbers_that_moved_and_nothing_else() -> None:
    note = changes(
        "total: 1,200\nrows 30\nmean 3.5\nold line",
        "total: 1,350\nrows 30\nmean 3.25\nnew line here",
        [("chart-1.png", "https://files/1")],
        [("chart-1.png", "https://files/2")],
    )
    assert "total: 1,200 → 1,350 (+150, +12.5%)" in note
    assert "mean: 3.5 → 3.25 (−0.25, −7.1%)" in note
    assert "rows" not in note
    assert "Lines new this time: 1; lines gone since: 1." in note
    assert "The previous chart, beside this one: chart-1.png <https://files/1>" in note


def test_changes_of_the_same_output_say_so() -> None:
    assert changes("a 1\nb 2", "a 1\nb 2", [], []) == "The output is the same as last time."


def test_changes_from_zero_and_to_negative() -> None:
    note = changes("count 0\nbalance 10", "count 4\nbalance -5", [], [])
    assert "count: 0 → 4 (+4)" in note
    assert "balance: 10 → -5 (−15, −150.0%)" in note
