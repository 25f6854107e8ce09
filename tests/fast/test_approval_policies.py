"""The policy store on its own: which policy applies where, what survives a restart, and
the settings' checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.conversations.keys import ConversationKey
from bot.conversations.policy import Effective, Policies, PolicySettings, Scope, parse_mode
from bot.database import Databases

THREAD = ConversationKey("discord", "guild-1", "channel-1", "thread-1")
OTHER_CHANNEL = ConversationKey("discord", "guild-1", "channel-2", "thread-2")
OTHER_SERVER = ConversationKey("discord", "guild-2", "channel-1", "thread-3")
DM = ConversationKey("discord", "dm", "user-1")


def test_a_channel_overrides_its_server_which_overrides_the_default(tmp_path: Path) -> None:
    policies = Policies(Databases.sqlite(tmp_path), PolicySettings(default="approve"))
    assert policies.effective(THREAD) == Effective("approve", "the default")
    policies.set(Scope.workspace_of(THREAD), "off", "admin")
    assert policies.effective(OTHER_CHANNEL) == Effective("off", "this workspace")
    policies.set(Scope.channel_of(THREAD), "auto", "admin")
    assert policies.effective(THREAD) == Effective("auto", "this channel")
    assert policies.mode(OTHER_CHANNEL) == "off"
    assert policies.mode(OTHER_SERVER) == "approve"  # another server, another platform id
    assert policies.mode(ConversationKey("slack", "guild-1", "channel-1", "1.2")) == "approve"
    policies.close()


def test_a_dm_has_its_own_policy_and_no_server(tmp_path: Path) -> None:
    policies = Policies(Databases.sqlite(tmp_path), PolicySettings())
    policies.set(Scope.workspace_of(DM), "off", "admin")  # "dm" is no server
    assert policies.effective(DM) == Effective("auto", "the default")
    policies.set(Scope.channel_of(DM), "approve", "admin")
    assert policies.effective(DM) == Effective("approve", "this direct message")
    assert policies.mode(ConversationKey("discord", "dm", "user-2")) == "auto"
    policies.close()


def test_policies_survive_a_restart(tmp_path: Path) -> None:
    first = Policies(Databases.sqlite(tmp_path), PolicySettings())
    first.set(Scope.channel_of(THREAD), "approve", "admin")
    first.set(Scope.channel_of(THREAD), "off", "admin")  # the latest setting counts
    first.close()
    again = Policies(Databases.sqlite(tmp_path), PolicySettings())
    assert again.mode(THREAD) == "off"
    again.close()


def test_modes_are_parsed_strictly_and_settings_are_checked() -> None:
    assert parse_mode(" Approve ") == "approve"
    assert parse_mode("sometimes") is None
    with pytest.raises(ValueError, match="default policy"):
        PolicySettings(default="maybe")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="approvers"):
        PolicySettings(approvers="anyone")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        PolicySettings(timeout_s=0)
