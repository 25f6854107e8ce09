"""Doors as operators and the bot write them, and the owners file the command line reads."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from egressproxy.grants import BadDoor, Door, Grants, Perimeter, PrivateDoor, doors
from egressproxy.owners import FileOwners, StaticOwners


@pytest.mark.parametrize(
    ("text", "host", "ports"),
    [
        ("pypi.org", "pypi.org", {80, 443}),
        ("PyPI.org.", "pypi.org", {80, 443}),
        ("pypi.org:8443", "pypi.org", {8443}),
        ("*.example.com", "*.example.com", {80, 443}),
        ("*.example.com:8080", "*.example.com", {8080}),
        ("[2606:2800::1]:443", "2606:2800::1", {443}),
        ("2606:2800::1", "2606:2800::1", {80, 443}),
        ("1572395042", "93.184.216.34", {80, 443}),
        (" files.pythonhosted.org ", "files.pythonhosted.org", {80, 443}),
    ],
)
def test_doors_parse_to_one_spelling(text: str, host: str, ports: set[int]) -> None:
    door = Door.parse(text)
    assert (door.host, set(door.ports)) == (host, ports)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "*",
        "*.com",
        "*.93.184.216.34",
        "exa mple.com",
        "a.com:0",
        "a.com:65536",
        "a.com:x",
        "[::1",
        "[::1]x",
        "a.com:80:90",
        "http://a.com",
        "a.com/path",
    ],
)
def test_bad_doors_say_what_is_wrong(text: str) -> None:
    with pytest.raises(BadDoor, match=re.escape(repr(text.strip()))):
        Door.parse(text)


def test_doors_print_as_they_are_written() -> None:
    assert [str(door) for door in doors("pypi.org, *.example.com:8080,[2606::1]:443")] == [
        "pypi.org",
        "*.example.com:8080",
        "[2606::1]:443",
    ]


def test_private_doors_name_their_port() -> None:
    assert PrivateDoor.parse("DB.internal:5432") == PrivateDoor("db.internal", 5432)
    assert PrivateDoor.parse("0xa000005:22") == PrivateDoor("10.0.0.5", 22)
    for text in ("db.internal", "db internal:5432"):
        with pytest.raises(BadDoor):
            PrivateDoor.parse(text)
    with pytest.raises(BadDoor, match="refused networks"):
        Perimeter.parse(refused="10.0.0.0/33")


async def test_owners_are_found_by_address_in_any_spelling(tmp_path: Path) -> None:
    grants = Grants("console:me", channel=doors("example.com"))
    static = StaticOwners({"172.30.0.7": grants})
    assert await static.grants_for("::ffff:172.30.0.7") == grants
    assert await static.grants_for("172.30.0.8") is None
    path = tmp_path / "owners.json"
    path.write_text(json.dumps({"172.30.0.7": {"owner": "console:me", "channel": ["example.com"]}}))
    owners = FileOwners(path)
    assert await owners.grants_for("172.30.0.7") == grants
    # The file is read again when it changes: a door opened later is seen.
    path.write_text(
        json.dumps({"172.30.0.7": {"owner": "console:me", "once": ["api.example.org:8443"]}})
    )
    found = await owners.grants_for("172.30.0.7")
    assert found is not None
    assert found.once == (Door("api.example.org", frozenset({8443})),)
    assert found.channel == ()


@pytest.mark.parametrize(
    "data",
    [
        {"not-an-address": {"owner": "x"}},
        {"172.30.0.7": {"channel": ["a.com"]}},
        {"172.30.0.7": {"owner": "x", "channel": "a.com"}},
        {"172.30.0.7": {"owner": "x", "channel": ["*.com"]}},
    ],
)
async def test_a_bad_owners_file_refuses_every_request(tmp_path: Path, data: object) -> None:
    path = tmp_path / "owners.json"
    path.write_text(json.dumps(data))
    with pytest.raises(BadDoor):
        await FileOwners(path).grants_for("172.30.0.7")
