"""Decisions only: every address here is input to `decide`, checked without a lookup or a
connection (the guard records any attempt, and each test asserts there was none)."""

from __future__ import annotations

import pytest

from egressproxy.decide import admit, decide
from egressproxy.grants import Door, Grants, Perimeter, PrivateDoor, doors
from tests.support.network import refuse_outside_network


@pytest.fixture(autouse=True)
def no_outside(monkeypatch: pytest.MonkeyPatch) -> object:
    tried = refuse_outside_network(monkeypatch)
    yield
    assert tried == [], "a decision tried the network"


def granted(*hosts: str) -> Grants:
    """A channel that opened exactly these hosts (so a refusal below is not for want of a
    grant)."""
    return Grants("discord:1/2", channel=tuple(Door.parse(host) for host in hosts))


LOOPBACK = [
    "127.0.0.1",
    "127.1",
    "127.0.1",
    "2130706433",
    "0x7f000001",
    "0x7f.0.0.1",
    "0x7F.1",
    "0177.0.0.1",
    "017700000001",
    "127.255.255.254",
    "127.0.0.1.",
    "::1",
    "[::1]",
    "0:0:0:0:0:0:0:1",
]
METADATA = [
    "169.254.169.254",
    "169.254.43518",
    "2852039166",
    "0xa9fea9fe",
    "0251.0376.0251.0376",
    "0xa9.0xfe.0xa9.0xfe",
    "169.254.0.1",
]
RFC1918 = [
    "10.0.0.5",
    "10.1",
    "167772165",
    "012.0.0.5",
    "172.16.0.1",
    "172.31.255.255",
    "192.168.1.1",
    "0xc0a80101",
    "3232235777",
]
CGNAT = ["100.64.0.1", "100.127.255.254", "1681915905"]
# Addresses to decide on, never bound.
UNSPECIFIED = ["0.0.0.0", "0", "0.0.0.1", "::", "[::]"]  # noqa: S104
MULTICAST = ["224.0.0.1", "239.255.255.250", "ff02::1", "[ff05::2]"]
RESERVED = ["240.0.0.1", "255.255.255.255", "4294967295", "198.18.0.1", "192.0.2.1"]
IPV6_PRIVATE = ["fc00::1", "fd12:3456::1", "[fd00:ec2::254]", "fe80::1", "[fe80::a9fe:a9fe%eth0]"]
IPV6_CARRYING_V4 = [
    "::ffff:127.0.0.1",
    "[::ffff:7f00:1]",
    "::ffff:169.254.169.254",
    "::ffff:10.0.0.5",
    "::ffff:8.8.8.8",  # mapped forms are refused whatever they carry
    "::127.0.0.1",
    "::10.0.0.5",
    "64:ff9b::a00:5",  # NAT64 to 10.0.0.5
    "64:ff9b::7f00:1",  # NAT64 to 127.0.0.1
    "2002:a00:5::1",  # 6to4 from 10.0.0.5
    "2002:a9fe:a9fe::1",  # 6to4 from 169.254.169.254
]


@pytest.mark.parametrize(
    ("hosts", "reason"),
    [
        (LOOPBACK, "loopback"),
        (METADATA, "link-local"),
        (RFC1918, "private address"),
        (CGNAT, "carrier-grade NAT"),
        (UNSPECIFIED, "unspecified"),
        (MULTICAST, "multicast"),
        (RESERVED, "reserved"),
        (IPV6_PRIVATE, ""),
        (IPV6_CARRYING_V4, ""),
    ],
    ids=[
        "loopback",
        "metadata",
        "rfc1918",
        "cgnat",
        "unspecified",
        "multicast",
        "reserved",
        "ipv6-private",
        "ipv6-carrying-v4",
    ],
)
def test_private_addresses_are_refused_in_every_spelling_even_when_granted(
    hosts: list[str], reason: str
) -> None:
    for host in hosts:
        bare = host.strip("[]")
        for port in (80, 443, 8080):
            door = f"[{bare.split('%')[0]}]:{port}" if ":" in bare else f"{host}:{port}"
            verdict = decide(granted(door), host, port)
            assert not verdict.allowed, (host, port)
            assert verdict.address is None
            assert reason in verdict.reason, (host, verdict.reason)
            # Refused for what the address is, not for want of a door.
            assert "not open" not in verdict.reason


def test_the_reason_names_the_address_as_a_person_reads_it() -> None:
    assert decide(granted("0x7f.1"), "0x7f.1", 80).reason == "127.0.0.1 is a loopback address"
    assert decide(granted(), "2852039166", 80).reason == (
        "169.254.169.254 is a link-local address (where cloud metadata services live)"
    )
    assert decide(granted(), "10.0.0.5", 5432).reason == "10.0.0.5:5432 is a private address"
    assert decide(granted(), "[::1]", 443).reason == "[::1] is a loopback address"


@pytest.mark.parametrize(
    "answers",
    [
        ["127.0.0.1"],
        ["93.184.216.34", "10.0.0.5"],  # one bad answer among good ones
        ["10.0.0.5", "93.184.216.34"],
        ["169.254.169.254"],
        ["::1"],
        ["2606:2800:220:1::", "fd00::1"],
        ["::ffff:127.0.0.1"],
        ["100.64.1.1"],
        ["0.0.0.0"],  # noqa: S104 - an answer to decide on, never bound
        ["not-an-address"],
        [],
    ],
)
def test_a_granted_name_that_resolves_anywhere_private_is_refused(answers: list[str]) -> None:
    verdict = decide(granted("data.example.com"), "data.example.com", 443, answers)
    assert not verdict.allowed
    assert verdict.address is None
    assert verdict.reason.startswith("data.example.com ")


def test_a_granted_name_with_public_answers_connects_to_the_first_checked_one() -> None:
    verdict = decide(
        granted("data.example.com"), "Data.Example.COM.", 443, ["93.184.216.34", "2606::1"]
    )
    assert verdict.allowed
    assert verdict.layer == "channel"
    assert verdict.address == "93.184.216.34"
    assert verdict.host == "data.example.com"


def test_public_neighbours_of_private_ranges_are_ordinary_hosts() -> None:
    for host in ("172.32.0.1", "100.128.0.1", "11.0.0.1", "192.169.0.1", "2606:2800::1"):
        assert decide(granted(host), host, 443).allowed, host
        assert decide(granted(), host, 443).reason.endswith("is not open to this channel")


def test_a_name_nobody_granted_is_refused_before_any_lookup() -> None:
    verdict = admit(granted("pypi.org"), "example.com", 443)
    assert not verdict.allowed
    assert verdict.lookup is None
    assert verdict.reason == "example.com is not open to this channel"
    assert admit(granted("pypi.org"), "pypi.org", 443).lookup == "pypi.org"


@pytest.mark.parametrize(
    ("door", "host", "port", "opens"),
    [
        ("example.com", "example.com", 443, True),
        ("example.com", "example.com", 80, True),
        ("example.com", "example.com", 8080, False),
        ("example.com:8080", "example.com", 8080, True),
        ("example.com:8080", "example.com", 443, False),
        ("example.com", "www.example.com", 443, False),
        ("example.com", "example.com.evil.org", 443, False),
        ("*.example.com", "a.example.com", 443, True),
        ("*.example.com", "a.b.example.com", 443, True),
        ("*.example.com", "example.com", 443, False),
        ("*.example.com", "badexample.com", 443, False),
        ("*.example.com", "example.com.evil.org", 443, False),
        ("EXAMPLE.com.", "example.COM", 443, True),
        ("93.184.216.34", "1572395042", 443, True),  # the same address, as an integer
    ],
)
def test_doors_open_exact_names_suffixes_and_ports(
    door: str, host: str, port: int, opens: bool
) -> None:
    verdict = decide(granted(door), host, port, ["93.184.216.34"])
    assert verdict.allowed is opens, verdict.reason
    if not opens:
        assert verdict.reason.endswith("is not open to this channel")


def test_an_international_name_is_compared_in_its_ascii_form() -> None:
    verdict = decide(granted("bücher.example"), "BÜCHER.example", 443, ["93.184.216.34"])
    assert verdict.allowed
    assert verdict.host == "xn--bcher-kva.example"
    assert decide(
        granted("xn--bcher-kva.example"), "bücher.example", 443, ["93.184.216.34"]
    ).allowed


def test_the_reason_shows_a_port_only_when_it_is_not_a_default_one() -> None:
    assert decide(granted(), "example.com", 443).reason == "example.com is not open to this channel"
    assert decide(granted(), "example.com", 8443).reason == (
        "example.com:8443 is not open to this channel"
    )


def test_each_layer_opens_and_says_which_it_was() -> None:
    grants = Grants(
        "slack:T/C",
        operator=doors("pypi.org,files.pythonhosted.org"),
        channel=doors("*.example.com"),
        once=doors("api.example.org:8443"),
    )
    public = ["93.184.216.34"]
    assert decide(grants, "pypi.org", 443, public).layer == "operator"
    assert decide(grants, "x.example.com", 443, public).layer == "channel"
    assert decide(grants, "api.example.org", 8443, public).layer == "once"
    assert decide(grants, "api.example.org", 8443, public).reason == "open for this run"
    assert not decide(grants, "api.example.org", 443, public).allowed


@pytest.mark.parametrize(
    "host",
    [
        "",
        "exa mple.com",
        "a..b",
        "-a.com",
        "a_b.com/x",
        "a@b.com",
        "256.1.1.1",
        "1.2.3.4.5",
        "1.com.2",
    ],
)
def test_malformed_hosts_are_refused_as_such(host: str) -> None:
    verdict = decide(granted("a.com"), host, 443, ["93.184.216.34"])
    assert not verdict.allowed
    assert verdict.reason.endswith("is not a valid host name"), verdict.reason


def test_a_bad_port_is_refused() -> None:
    for port in (0, 65536, -1):
        assert decide(granted("a.com"), "a.com", port, ["93.184.216.34"]).reason.endswith(
            "has no valid port"
        )


def test_operator_named_private_doors_open_only_that_host_and_port() -> None:
    perimeter = Perimeter(
        (PrivateDoor.parse("db.internal:5432"), PrivateDoor.parse("10.0.0.7:6379"))
    )
    nobody = Grants("discord:1/2")
    db = decide(nobody, "db.internal", 5432, ["10.0.0.5"], perimeter)
    assert db.allowed
    assert (db.layer, db.address) == ("private", "10.0.0.5")
    assert decide(nobody, "10.0.0.7", 6379, (), perimeter).address == "10.0.0.7"
    assert decide(nobody, "167772167", 6379, (), perimeter).allowed  # 10.0.0.7, spelt otherwise
    for host, port in [("db.internal", 22), ("10.0.0.5", 5432), ("10.0.0.7", 22)]:
        assert not decide(nobody, host, port, ["10.0.0.5"], perimeter).allowed, (host, port)
    # Another name that resolves to the same private address is no named door.
    assert not decide(
        granted("alias.example.com"), "alias.example.com", 5432, ["10.0.0.5"], perimeter
    ).allowed


def test_refused_networks_win_over_everything() -> None:
    perimeter = Perimeter.parse(
        private_allowed="proxy.internal:3128,10.0.0.9:3128", refused="10.0.0.9/32,34.1.2.0/24"
    )
    nobody = Grants("discord:1/2")
    assert not decide(nobody, "10.0.0.9", 3128, (), perimeter).allowed
    assert not decide(nobody, "proxy.internal", 3128, ["10.0.0.9"], perimeter).allowed
    # A public Kubernetes API is refused though granted, by address and through a name.
    api = granted("34.1.2.3", "k8s.example.com")
    assert "proxy's own side" in decide(api, "34.1.2.3", 443, (), perimeter).reason
    assert not decide(api, "k8s.example.com", 443, ["34.1.2.3"], perimeter).allowed
