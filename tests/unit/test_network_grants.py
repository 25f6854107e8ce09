"""Host patterns, the grants of a conversation, the network settings, and the proxy's traffic
on /usage: decisions on text only (nothing connects)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.conversations import ConversationKey, Conversations
from bot.conversations.access import AccessRules, Place
from bot.conversations.moderation import USAGE_FOR_ADMINS
from bot.conversations.network import NetworkGrants, NetworkSettings, parse_network
from bot.conversations.people import Admission, Person
from bot.database import Databases
from bot.errors import Refused
from bot.settings import SettingsError, load_settings
from executor.network_grants import Grant, Grants, Layer, PatternError, parse_pattern

KEY = ConversationKey("slack", "T1", "C1", "100.1")


@pytest.mark.parametrize(
    ("typed", "shown", "ports"),
    [
        ("Example.COM", "example.com", {443, 80}),
        ("example.com.:8443", "example.com", {8443}),
        ("*.Example.com", "*.example.com", {443, 80}),
        ("bücher.de", "xn--bcher-kva.de", {443, 80}),
        ("93.184.216.34:443", "93.184.216.34", {443}),
        ("[2606:4700::1]:443", "[2606:4700::1]", {443}),
    ],
)
def test_good_patterns_are_rebuilt_in_one_form(typed: str, shown: str, ports: set[int]) -> None:
    pattern = parse_pattern(typed)
    assert pattern.name == shown
    assert pattern.ports == ports


@pytest.mark.parametrize(
    ("typed", "why"),
    [
        # Private addresses, in every spelling a resolver accepts.
        ("127.0.0.1", "is a private address"),
        ("localhost:80", "is a private address"),
        ("*.dev.localhost", "is a private address"),
        ("[::1]", "is a private address"),
        ("[::ffff:127.0.0.1]:80", "is a private address"),
        ("169.254.169.254", "is a private address"),
        ("10.0.0.5:5432", "is a private address"),
        ("172.16.0.1", "is a private address"),
        ("[fd00::1]", "is a private address"),
        ("2130706433", "short, integer, octal or hex form"),
        ("0x7f000001", "short, integer, octal or hex form"),
        ("0177.0.0.1", "short, integer, octal or hex form"),
        ("127.1", "short, integer, octal or hex form"),
        # Wildcards other than one leading *.
        ("*.com", "would open a whole top-level domain"),
        ("*", "the only wildcard allowed is a leading"),
        ("ex*ample.com", "the only wildcard allowed is a leading"),
        ("*.*.example.com", "the only wildcard allowed is a leading"),
        ("*example.com", "the only wildcard allowed is a leading"),
        ("*.10.0.0.1", "a wildcard goes with names"),
        # Not a host at all.
        ("https://example.com", "is not a host"),
        ("user@example.com", "is not a host"),
        ("example.com/path", "is not a host"),
        ("", "Name a host"),
        ("a..com", "is not a valid host name"),
        ("-bad.com", "is not a valid host name"),
        ("example.com:0", "the port must be a number"),
        ("example.com:65536", "the port must be a number"),
        ("example.com:http", "the port must be a number"),
        ("2001:db8::1:x", "write an IPv6 address in brackets"),
    ],
)
def test_bad_patterns_are_refused_saying_why(typed: str, why: str) -> None:
    with pytest.raises(PatternError) as refused:
        parse_pattern(typed)
    assert why in str(refused.value)


def test_a_private_destination_is_grantable_only_where_the_operator_names_it() -> None:
    private = frozenset({("10.0.0.5", 5432)})
    assert str(parse_pattern("10.0.0.5:5432", private)) == "10.0.0.5:5432"
    with pytest.raises(PatternError):
        parse_pattern("10.0.0.5", private)  # ports 443 and 80 were not named
    with pytest.raises(PatternError):
        parse_pattern("10.0.0.5:5433", private)


def test_grants_match_names_ports_and_wildcards_and_refuse_junk() -> None:
    grants = Grants(
        KEY.id,
        (
            Grant(parse_pattern("*.example.com"), Layer.CHANNEL),
            Grant(parse_pattern("api.test.org:8443"), Layer.ONCE),
        ),
    )
    assert grants.allows("files.example.com", 443)
    assert grants.allows("A.B.EXAMPLE.COM.", 80)
    assert not grants.allows("example.com", 443)  # the wildcard is for names below it
    assert not grants.allows("evilexample.com", 443)
    assert not grants.allows("files.example.com", 22)
    assert grants.allows("api.test.org", 8443)
    assert not grants.allows("api.test.org", 443)
    assert not grants.allows("files.example.com/..", 443)
    opening = grants.opening("api.test.org", 8443)
    assert opening is not None
    assert opening.layer is Layer.ONCE


def test_settings_read_the_mode_and_check_the_operators_hosts(tmp_path: Path) -> None:
    assert load_settings({}, None).network.mode == "off"
    chosen = load_settings(
        {
            "CELLMATE_NETWORK": "allowlist",
            "CELLMATE_NETWORK_ALLOWED": "pypi.org, *.pythonhosted.org",
            "CELLMATE_NETWORK_PRIVATE_ALLOWED": "db.internal:5432",
        },
        None,
    ).network
    assert chosen.on
    assert [str(p) for p in chosen.operator] == ["pypi.org", "*.pythonhosted.org"]
    assert chosen.private == {("db.internal", 5432)}
    for bad in (
        {"CELLMATE_NETWORK": "open"},
        {"CELLMATE_NETWORK_ALLOWED": "169.254.169.254"},
        {"CELLMATE_NETWORK_PRIVATE_ALLOWED": "db.internal"},
    ):
        with pytest.raises(SettingsError):
            load_settings(bad, None)


def test_the_network_command_is_parsed_strictly() -> None:
    assert parse_network("").action == "list"  # type: ignore[union-attr]
    allowed = parse_network("allow pypi.org once")
    assert allowed is not None
    assert (allowed.action, allowed.host, allowed.once) == ("allow", "pypi.org", True)
    assert parse_network("allow pypi.org") == parse_network("allow pypi.org channel")
    for bad in ("open pypi.org", "allow", "allow a b c", "deny", "allow pypi.org forever"):
        assert parse_network(bad) is None


async def test_traffic_is_shown_on_usage_for_admins_only(tmp_path: Path) -> None:
    network = NetworkGrants(Databases.sqlite(tmp_path), NetworkSettings(mode="allowlist"))
    conversations = Conversations(agent=None, admins=frozenset({"U-admin"}), network=network)  # type: ignore[arg-type]
    try:
        conversations.network_traffic(KEY, "pypi.org", 443, "allowed", 3, 2_000_000)
        conversations.network_traffic(KEY, "evil.example", 443, "refused")
        other = ConversationKey("slack", "T2", "C9", "1.1")
        conversations.network_traffic(other, "elsewhere.org", 443, "allowed")
        door = Admission(AccessRules())
        admin = Person("U-admin", Place("U-admin", "T1", "C1"))
        shown = await conversations.usage_for(door, admin, "T1")
        assert "pypi.org:443 allowed: 3 requests, 2.0 MB" in shown
        assert "evil.example:443 refused: 1 requests" in shown
        assert "elsewhere.org" not in shown
        with pytest.raises(Refused, match=USAGE_FOR_ADMINS):
            await conversations.usage_for(door, Person("U-bob", Place("U-bob", "T1", "C1")), "T1")
    finally:
        network.close()
