from __future__ import annotations

import pytest

from storage.content_types import disposition, guess_type, served_type
from storage.errors import InvalidKey
from storage.names import artifact_key, check_key, conversation_prefix, safe_name, unique_names


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("report.csv", "report.csv"),
        ("../../etc/passwd", "passwd"),
        ("/etc/shadow", "shadow"),
        ("..\\..\\boot.ini", "boot.ini"),
        ("a\x00b.txt", "ab.txt"),
        ("line\nbreak.png", "linebreak.png"),
        ("..", "file"),
        ("", "file"),
        (".bashrc", "bashrc"),
        ("résumé 2025.pdf", "resume-2025.pdf"),
        ("データ.csv", "file.csv"),
        (b"caf\xe9.csv", "caf.csv"),
        ("x" * 300 + ".csv", "x" * 116 + ".csv"),
        ("<script>.html", "script.html"),
    ],
)
def test_safe_name(raw: str | bytes, expected: str) -> None:
    assert safe_name(raw) == expected


def test_unique_names_keep_order_and_extension() -> None:
    assert unique_names(["a.csv", "A.csv", "a.csv", "b"]) == ["a.csv", "A-2.csv", "a-3.csv", "b"]


def test_keys_are_steered_by_nothing_a_user_writes() -> None:
    key = artifact_key("slack:T1:C1:1712.55", "0123456789abcdef", "../../x.png")
    prefix, run, name = key.split("/")
    assert prefix == conversation_prefix("slack:T1:C1:1712.55")
    assert len(prefix) == 24
    assert (run, name) == ("0123456789abcdef", "x.png")
    assert conversation_prefix("a") != conversation_prefix("b")


@pytest.mark.parametrize("key", ["a/../b", "../a", "a//b", "/a", "a/.b", "a\nb", "", "a/b c"])
def test_check_key_refuses(key: str) -> None:
    with pytest.raises(InvalidKey):
        check_key(key)


def test_content_types_and_dispositions() -> None:
    assert guess_type("x.csv") == "text/csv"
    assert guess_type("x.PNG") == "image/png"
    assert guess_type("noext") == "application/octet-stream"
    assert served_type("text/csv") == "text/csv; charset=utf-8"
    assert disposition("image/png", "a.png") == 'inline; filename="a.png"'
    for unsafe in ("text/html", "image/svg+xml", "application/pdf", "application/xhtml+xml"):
        assert disposition(unsafe, "f").startswith("attachment")


def test_ages() -> None:
    from datetime import timedelta

    from storage.retention import parse_age

    assert parse_age("30d") == timedelta(days=30)
    assert parse_age("1d12h") == timedelta(days=1, hours=12)
    assert parse_age("90m") == timedelta(minutes=90)
    for bad in ("", "30", "thirty days", "-1d", "1w"):
        with pytest.raises(ValueError, match="is not an age"):
            parse_age(bad)
