"""Who may act on a conversation, who is admitted by DM, and which hosts the front ends trust
with files, as an operator configures them."""

from __future__ import annotations

from dataclasses import replace
from typing import cast

import pytest

from bot.agent import Agent
from bot.conversations import ConversationKey, Conversations, Person, Place
from bot.conversations.access import AccessRules, Participants, allowed
from bot.conversations.presence import Expiring, Presence
from bot.platforms.on_discord.client import file_hosts as discord_hosts
from bot.platforms.on_slack.app import file_hosts as slack_hosts
from bot.settings import DiscordSettings, SettingsError, SlackSettings, load_settings


async def test_participants_and_moderators_may_act_and_others_not() -> None:
    conversations = Conversations(cast(Agent, None))
    one, two = ConversationKey("slack", "T", "C", "1"), ConversationKey("slack", "T", "C", "2")
    conversations.participants.add(one.id, "alice")

    async def moderator() -> bool:
        return True

    alice, bob = Person("alice", Place("alice")), Person("bob", Place("bob"))
    assert await conversations.may_act(alice, one)
    assert not await conversations.may_act(bob, one)
    assert not await conversations.may_act(alice, two)  # another conversation
    assert await conversations.may_act(Person("bob", Place("bob"), moderator), one)


def test_participants_forget_the_oldest_conversations_first() -> None:
    people = Participants(size=2)
    people.add("one", "alice")
    people.add("two", "alice")
    people.add("one", "bob")  # "one" is the most recent now
    people.add("three", "alice")
    assert people.includes("one", "alice")
    assert people.includes("one", "bob")
    assert not people.includes("two", "alice")


def test_file_hosts_default_to_the_platform_and_a_custom_api_server() -> None:
    assert slack_hosts(SlackSettings()) == ("files.slack.com",)
    assert slack_hosts(SlackSettings(api_url="http://127.0.0.1:9000/api/")) == (
        "files.slack.com",
        "http://127.0.0.1:9000",
    )
    assert discord_hosts(DiscordSettings()) == ("cdn.discordapp.com", "media.discordapp.net")
    chosen = DiscordSettings(api_url="http://127.0.0.1:9/api/v10", file_hosts=("cdn.example",))
    assert discord_hosts(chosen) == ("cdn.example",)


@pytest.mark.parametrize(
    ("name", "value", "prefix"),
    [
        ("CELLMATE_SLACK_FILE_HOSTS", "ftp://files.slack.com", "CELLMATE_SLACK_"),
        ("CELLMATE_DISCORD_FILE_HOSTS", "https://user@cdn.discordapp.com", "CELLMATE_DISCORD_"),
        ("CELLMATE_SLACK_FILES_PER_ANSWER", "-1", "CELLMATE_SLACK_"),
    ],
)
def test_bad_file_settings_are_refused_at_start(name: str, value: str, prefix: str) -> None:
    with pytest.raises(SettingsError, match=f"check the {prefix}"):
        load_settings({name: value}, env_file=None)


# ── direct messages ────────────────────────────────────────────────────────────────────────

GUILD_AND_ROLE = AccessRules(servers=frozenset({"g"}), roles=frozenset({"r"}))


def _dm(user: str, *found: Place) -> Place:
    return Place(user, dm=True, found_in=found)


@pytest.mark.parametrize(
    ("rules", "place", "admitted"),
    [
        # a member of the allowed server with the allowed role
        (GUILD_AND_ROLE, _dm("u", Place("u", "g", None, ["r"])), True),
        # in the allowed server without the role; in another with a role of that id
        (GUILD_AND_ROLE, _dm("u", Place("u", "g", None, ["x"])), False),
        (GUILD_AND_ROLE, _dm("u", Place("u", "other", None, ["r"])), False),
        # found nowhere, or the facts are about someone else, or are a DM themselves
        (GUILD_AND_ROLE, _dm("u"), False),
        (GUILD_AND_ROLE, _dm("u", Place("v", "g", None, ["r"])), False),
        (GUILD_AND_ROLE, _dm("u", Place("u", "g", None, ["r"], dm=True)), False),
        # a channel allowlist: a member of one of its channels
        (AccessRules(channels=frozenset({"c"})), _dm("u", Place("u", "t", "c")), True),
        (AccessRules(channels=frozenset({"c"})), _dm("u", Place("u", "t", "d")), False),
        # the DM allowlist admits without being found anywhere, inside the user allowlist
        (replace(GUILD_AND_ROLE, dm_users=frozenset({"u"})), _dm("u"), True),
        (
            replace(GUILD_AND_ROLE, dm_users=frozenset({"u"}), users=frozenset({"v"})),
            _dm("u"),
            False,
        ),
        # DMs off refuse everyone, the DM allowlist too
        (replace(GUILD_AND_ROLE, dms=False, dm_users=frozenset({"u"})), _dm("u"), False),
        # no place rules: every DM, as before
        (AccessRules(), _dm("u"), True),
        (AccessRules(users=frozenset({"u"})), _dm("u"), True),
        (AccessRules(users=frozenset({"v"})), _dm("u"), False),
    ],
)
def test_a_dm_is_admitted_only_for_people_the_place_rules_admit_somewhere(
    rules: AccessRules, place: Place, admitted: bool
) -> None:
    assert allowed(rules, place) is admitted


async def test_presence_asks_the_platform_only_when_the_rules_need_it() -> None:
    asked: list[str] = []

    async def lookup(dm: Place) -> list[Place]:
        asked.append(dm.user)
        return [Place(dm.user, "g", None, ["r"])] if dm.user == "member" else []

    presence = Presence(replace(GUILD_AND_ROLE, dm_users=frozenset({"listed"})), lookup)
    member = await presence.place(Place("member", dm=True))
    assert allowed(presence.rules, member)
    assert not allowed(presence.rules, await presence.place(Place("stranger", dm=True)))
    assert allowed(presence.rules, await presence.place(Place("listed", dm=True)))
    in_channel = Place("stranger", "g", "c", ["r"])
    assert await presence.place(in_channel) is in_channel
    assert asked == ["member", "stranger"]
    # Callers that cannot wait get what was last found, and nothing for the unknown.
    assert allowed(presence.rules, presence.known(Place("member", dm=True)))
    assert not allowed(presence.rules, presence.known(Place("unknown", dm=True)))


def test_expiring_entries_last_their_time_and_the_oldest_go_first() -> None:
    now = [0.0]
    kept: Expiring[str, int] = Expiring(10.0, size=2, clock=lambda: now[0])
    kept.put("a", 1)
    now[0] = 9.9
    assert kept.fresh("a") == 1
    now[0] = 10.0
    with pytest.raises(KeyError):
        kept.fresh("a")
    kept.put("a", 1)
    kept.put("b", 2)
    kept.put("c", 3)
    assert len(kept) == 2
    with pytest.raises(KeyError):
        kept.fresh("a")
    assert (kept.fresh("b"), kept.fresh("c")) == (2, 3)
