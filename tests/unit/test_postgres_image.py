"""The PostgreSQL image's recipe: which Debian sources the host's apt reads, how its
listing is read, and that the tag follows every input."""

from __future__ import annotations

from bot.ops.postgres_image import postgres_hash
from executor.apt import Deb, parse_uri_line, sources


def test_debian_layout_adds_updates_and_security() -> None:
    lines = sources("http://deb.debian.org/debian/").splitlines()
    assert [line.split()[-2:] for line in lines] == [
        ["bookworm", "main"],
        ["bookworm-updates", "main"],
        ["bookworm-security", "main"],
    ]
    assert "http://deb.debian.org/debian-security" in lines[2]


def test_another_layout_gets_no_guessed_security_source() -> None:
    lines = sources("http://mirror.example/deb").splitlines()
    assert len(lines) == 2
    assert all("security" not in line for line in lines)


def test_print_uris_lines_with_or_without_a_checksum() -> None:
    line = (
        "'http://deb.debian.org/debian/pool/main/g/gdbm/libgdbm6_1.23-3_amd64.deb' "
        "libgdbm6_1.23-3_amd64.deb 72248 MD5Sum:74449c52293efdb6d013d29856047e75"
    )
    assert parse_uri_line(line) == Deb(
        url="http://deb.debian.org/debian/pool/main/g/gdbm/libgdbm6_1.23-3_amd64.deb",
        filename="libgdbm6_1.23-3_amd64.deb",
    )
    bare = (
        "'http://x/perl-base_5.36.0-7%2bdeb12u4_amd64.deb' perl-base_5.36.0-7+deb12u4_amd64.deb 1 "
    )
    assert parse_uri_line(bare).filename == "perl-base_5.36.0-7+deb12u4_amd64.deb"


def test_the_tag_follows_the_base_and_each_package_version() -> None:
    debs = [Deb("u", "postgresql-15_15.20-0+deb12u1_amd64.deb"), Deb("u", "libpq5_15.20_amd64.deb")]
    same = postgres_hash("base:1", list(reversed(debs)))
    assert postgres_hash("base:1", debs) == same
    assert postgres_hash("base:2", debs) != same
    newer = [Deb("u", "postgresql-15_15.21-0+deb12u1_amd64.deb"), debs[1]]
    assert postgres_hash("base:1", newer) != same
