"""The Slack app manifest in the repo asks for what the Slack front end handles."""

from __future__ import annotations

from pathlib import Path

import yaml

from bot.platforms.on_slack.modals import RUN_MODAL

MANIFEST = Path(__file__).resolve().parents[2] / "bot/platforms/on_slack/manifest.yml"
APP = "\n".join(path.read_text() for path in sorted(MANIFEST.parent.glob("*.py")))
"""The Slack front end's source, all its modules."""


def test_manifest_declares_the_commands_shortcut_and_events_the_app_handles() -> None:
    manifest = yaml.safe_load(MANIFEST.read_text())
    commands = {c["command"] for c in manifest["features"]["slash_commands"]}
    assert commands == {
        "/run",
        "/files",
        "/reset",
        "/restore",
        "/export",
        "/usage",
        "/policy",
        "/network",
        "/schedule",
        "/mcp",
    }
    for command in commands:
        assert f'app.command("{command}")' in APP
    (shortcut,) = manifest["features"]["shortcuts"]
    assert f'app.shortcut("{shortcut["callback_id"]}")' in APP
    events = set(manifest["settings"]["event_subscriptions"]["bot_events"])
    assert {"app_mention", "message.channels", "message.im"} <= events
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])
    # Files shared with a message are downloaded, and results uploaded, by the bot.
    assert {"files:read", "files:write", "chat:write", "commands", "reactions:write"} <= scopes
    # DM admission reads the members of the allowed channels (public and private).
    assert {"channels:read", "groups:read"} <= scopes
    assert manifest["settings"]["interactivity"]["is_enabled"] is True
    # The assistant view: its threads' events, and the scope of their title and prompts.
    assert manifest["features"]["assistant_view"]["assistant_description"]
    assert {"assistant_thread_started", "assistant_thread_context_changed"} <= events
    assert "assistant:write" in scopes
    assert "thread_started(" in APP
    assert "thread_context_changed(" in APP
    assert RUN_MODAL in APP
