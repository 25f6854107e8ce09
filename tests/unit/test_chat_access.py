"""Who may act on a conversation, and which hosts the front ends trust with files, as an
operator configures them."""

from __future__ import annotations

from typing import cast

import pytest

from bot.agent import Agent
from bot.conversations import ConversationKey, Conversations, Person, Place
from bot.conversations.access import Participants
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
