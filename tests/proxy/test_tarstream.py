"""Tar streams put into a sandbox are rebuilt: the engine (root) only ever extracts plain files
and folders under the target, owned by the sandbox user, within the caps."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import tarfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dockerproxy import RequestRefused
from dockerproxy.tarstream import TarCaps, rebuild
from executor.archive import build_input_tar, build_workspace_tar
from tests.proxy.tars import Entry, archive, extracted, member

MiB = 1024 * 1024
CAPS = TarCaps(uid=61000, gid=61000, max_bytes=16 * MiB, max_member_bytes=8 * MiB, max_members=50)


def rebuilt(raw: bytes, caps: TarCaps = CAPS) -> list[Entry]:
    out = io.BytesIO()
    rebuild(io.BytesIO(raw), out, caps)
    return extracted(out.getvalue())


def refused(raw: bytes, caps: TarCaps = CAPS) -> tuple[str, list[Entry]]:
    """The reason, and what had gone to the engine before the refusal (still checked)."""
    out = io.BytesIO()
    with pytest.raises(RequestRefused) as caught:
        rebuild(io.BytesIO(raw), out, caps)
    return str(caught.value), extracted(out.getvalue(), whole=False)


def test_the_executors_tars_pass_unchanged_but_for_the_owner() -> None:
    files = {"in.csv": b"a,b\n1,2\n", "notes \u00e9t\u00e9.txt": b"x" * 70_000, "empty": b""}
    for raw in (
        build_input_tar(files, 20, 10 * MiB, uid=1000, gid=1000),
        build_workspace_tar({"a/b/c.txt": b"1", "a/d.txt": b"2", "e.txt": b"3"}),
    ):
        with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
            given = {i.name: (i.type, i.mode) for i in tar}
        out = rebuilt(raw)
        assert {e.name: (e.info.type, e.info.mode) for e in out} == given
        assert {(e.info.uid, e.info.gid, e.info.uname, e.info.gname) for e in out} == {
            (61000, 61000, "", "")
        }
    assert {e.name: e.data for e in rebuilt(build_input_tar(files, 20, 10 * MiB))} == files


def test_a_tar_of_a_folder_with_its_dot_entry_keeps_the_targets_own_mode() -> None:
    raw = archive(
        member("./", kind=tarfile.DIRTYPE, mode=0o777),
        member("./sub/", kind=tarfile.DIRTYPE, mode=0o750),
        member("./sub/a.txt", b"a"),
        member(".//sub/./b.txt", b"b"),
    )
    assert [(e.name, e.info.mode) for e in rebuilt(raw)] == [
        ("sub", 0o750),
        ("sub/a.txt", 0o644),
        ("sub/b.txt", 0o644),
    ]


@pytest.mark.parametrize("target", ["/", "../..", "/etc", ".", "sub", "/mnt/data/../../etc"])
def test_a_link_and_then_a_file_through_it_never_land(target: str) -> None:
    for link in (tarfile.SYMTYPE, tarfile.LNKTYPE):
        raw = archive(
            member("safe.txt", b"ok"),
            member("l", kind=link, link=target),
            member("l/etc/x", b"#!/bin/sh\n", mode=0o4755),
        )
        reason, sent = refused(raw)
        assert "link" in reason
        assert [e.name for e in sent] == ["safe.txt"]


def test_a_file_under_a_folder_the_tar_does_not_hold_is_refused() -> None:
    # The engine would create the folder itself, as root, or follow what the sandbox made
    # at that name (a link it planted before the upload).
    for raw in (
        archive(member("l/etc/x", b"x")),
        archive(member("f", b"file"), member("f/x", b"x")),
        archive(member("a/", kind=tarfile.DIRTYPE), member("a/b/c", b"x")),
    ):
        assert "before its folder" in refused(raw)[0]


@pytest.mark.parametrize(
    "kind",
    [
        tarfile.LNKTYPE,
        tarfile.SYMTYPE,
        tarfile.CHRTYPE,
        tarfile.BLKTYPE,
        tarfile.FIFOTYPE,
        tarfile.CONTTYPE,
        tarfile.GNUTYPE_SPARSE,
        b"Z",
        b"V",
    ],
)
def test_members_that_are_not_files_or_folders_are_refused(kind: bytes) -> None:
    raw = archive(member("x", kind=kind, link="/etc/passwd"))
    assert "only files and folders" in refused(raw)[0]


def test_a_hard_link_to_the_hosts_or_the_sandboxs_files_is_refused() -> None:
    for target in ("/etc/passwd", "etc/passwd", "../../../../etc/shadow", "a.txt"):
        raw = archive(member("a.txt", b"a"), member("p", kind=tarfile.LNKTYPE, link=target))
        reason, sent = refused(raw)
        assert "a hard link" in reason
        assert [e.name for e in sent] == ["a.txt"]


@pytest.mark.parametrize(
    "name",
    ["/etc/x", "//etc/x", "/mnt/data/x", "/", "../x", "a/../../x", "./../x", "a/..", "..",
     "a/b/../../../x", "sub/../sub/../../x"],
)  # fmt: skip
def test_names_outside_the_target_are_refused(name: str) -> None:
    for header in ("ustar", "pax", "gnu"):
        raw = archive(
            member("a/", kind=tarfile.DIRTYPE),
            member("a/b/", kind=tarfile.DIRTYPE),
            member(
                name if header == "ustar" else "plain.txt",
                b"x",
                pax={"path": name} if header == "pax" else None,
            )
            if header != "gnu"
            else member(name + "/" * 120, b"x", kind=tarfile.DIRTYPE, gnu_long=True),
        )
        reason = refused(raw)[0]
        assert any(why in reason for why in ("absolute", "goes up a folder", "without a name")), (
            header,
            reason,
        )


@pytest.mark.parametrize("name", ["a\nb", "a\rb", "\x1b[31m", "x\x7f", "tab\there"])
def test_names_with_control_characters_are_refused(name: str) -> None:
    assert "control characters" in refused(archive(member("ok", pax={"path": name})))[0]


def test_names_that_are_not_utf8_are_refused() -> None:
    assert "not UTF-8" in refused(archive(member("bad\udcff")))[0]


@pytest.mark.parametrize("mode", [0o4755, 0o2755, 0o6777, 0o1777, 0o7777, 0o177777])
def test_set_id_and_sticky_bits_are_cleared(mode: int) -> None:
    raw = archive(
        member("d/", kind=tarfile.DIRTYPE, mode=mode),
        member("d/run", b"#!/bin/sh\n", mode=mode, uid=0),
    )
    for entry in rebuilt(raw):
        assert entry.info.mode == mode & 0o777
        assert (entry.info.uid, entry.info.gid) == (61000, 61000)


def test_owners_in_extended_headers_are_replaced() -> None:
    raw = archive(member("x", b"x", pax={"uid": "0", "gid": "0", "uname": "root"}))
    (entry,) = rebuilt(raw)
    assert (entry.info.uid, entry.info.gid, entry.info.uname) == (61000, 61000, "")


def test_the_files_together_may_not_exceed_the_cap() -> None:
    small = TarCaps(61000, 61000, max_bytes=3000, max_member_bytes=2000, max_members=50)
    raw = archive(member("a", b"a" * 1500), member("b", b"b" * 1500), member("c", b"c" * 100))
    reason, sent = refused(raw, small)
    assert "total more than 3000 bytes" in reason
    assert [e.name for e in sent] == ["a", "b"]


def test_one_file_may_not_exceed_the_cap() -> None:
    small = TarCaps(61000, 61000, max_bytes=10_000, max_member_bytes=2000, max_members=50)
    assert "at most 2000" in refused(archive(member("a", b"a" * 2001)), small)[0]


def test_a_size_that_the_data_does_not_have_is_refused() -> None:
    # The declared (or extended-header) size is checked before a byte of the file goes on.
    huge = archive(member("a", b"a" * 100, size=64 * MiB))
    assert "at most" in refused(huge)[0]
    for raw in (
        archive(member("a", b"a" * 100, pax={"size": str(5000)}))[:3000],
        member("a", b"a" * 10, size=4000),
    ):
        reason, sent = refused(raw)
        assert "ended inside" in reason or "not a tar" in reason
        assert sent == [] or [e.data for e in sent] == []


def test_the_number_of_members_is_capped() -> None:
    few = TarCaps(61000, 61000, max_bytes=MiB, max_member_bytes=MiB, max_members=10)
    raw = archive(*(member(f"f{i}") for i in range(11)))
    reason, sent = refused(raw, few)
    assert "at most 10 files and folders" in reason
    assert len(sent) == 10


def test_a_member_twice_is_refused() -> None:
    for second in (member("a", b"2"), member("a/", kind=tarfile.DIRTYPE), member("./a", b"3")):
        assert "appears twice" in refused(archive(member("a", b"1"), second))[0]


def test_gnu_long_names_are_read_and_checked_like_any_other() -> None:
    long_folder = "f" * 150
    raw = archive(
        member(long_folder + "/", kind=tarfile.DIRTYPE, gnu_long=True),
        member(long_folder + "/" + "n" * 200, b"long", gnu_long=True),
    )
    assert [e.name for e in rebuilt(raw)] == [long_folder, long_folder + "/" + "n" * 200]
    # A long name that stops at a NUL is the part before it; a long link name on a file
    # is dropped with the file's kind.
    cut = archive(member("safe\x00/../../../etc/x" + "y" * 100, b"x", gnu_long=True))
    assert [e.name for e in rebuilt(cut)] == ["safe"]
    too_long = archive(member("a" * 300, b"x", gnu_long=True))
    assert "too long" in refused(too_long)[0]


def test_extended_header_overrides_are_checked_after_they_apply() -> None:
    for pax in (
        {"path": "../../etc/cron.d/x"},
        {"path": "/etc/x"},
        {"path": "ok/../../x"},
    ):
        assert refused(archive(member("innocent.txt", b"x", pax=pax)))[0]
    # A link target in an extended header never makes a file a link.
    (entry,) = rebuilt(archive(member("f", b"data", pax={"linkpath": "/etc/passwd"})))
    assert entry.info.isreg()
    assert entry.data == b"data"
    # A global header's path applies to what follows, and is checked there.
    records = b"28 path=../../../etc/passwd\n"
    raw = archive(member("g", records, kind=tarfile.XGLTYPE), member("f", b"x"))
    assert "goes up a folder" in refused(raw)[0]


@pytest.mark.parametrize(
    ("compress", "kind"),
    [(gzip.compress, "gzip"), (bz2.compress, "bzip2"), (lzma.compress, "xz")],
)
def test_compressed_uploads_are_refused(compress: object, kind: str) -> None:
    raw = compress(archive(member("a", b"a")))  # type: ignore[operator]
    assert f"{kind}-compressed" in refused(raw)[0]


def test_the_rebuilt_stream_never_starts_like_a_compressed_one() -> None:
    # A first file named like a bzip2 stream: the engine would otherwise try to decompress.
    for name in ("BZh91AY&SY", "BZh", "BZh9.csv"):
        out = io.BytesIO()
        rebuild(io.BytesIO(archive(member(name, b"x"))), out, CAPS)
        assert not out.getvalue().startswith(b"BZh")
        assert [e.name for e in extracted(out.getvalue())] == [name]


@pytest.mark.parametrize(
    "raw",
    [b"", b"not a tar at all" * 100, bytes(100), b"\xff" * 1024, archive(member("a", b"a"))[:700]],
)
def test_what_is_not_a_whole_tar_is_refused(raw: bytes) -> None:
    assert refused(raw)[0]


def test_an_empty_archive_stays_empty() -> None:
    assert rebuilt(bytes(1024)) == []
    assert rebuilt(bytes(10240)) == []


class CountingSource(io.BytesIO):
    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.read_so_far = 0

    def read(self, size: int | None = -1) -> bytes:
        chunk = super().read(size if size is None or size < 0 else min(size, 4096))
        self.read_so_far += len(chunk)
        return chunk


class RecordingSink(io.BytesIO):
    def __init__(self, source: CountingSource) -> None:
        super().__init__()
        self.source = source
        self.read_at_first_write: int | None = None

    def write(self, data: bytes) -> int:  # type: ignore[override]
        if self.read_at_first_write is None:
            self.read_at_first_write = self.source.read_so_far
        return super().write(data)


def test_the_tar_is_streamed_not_held() -> None:
    raw = archive(member("big", b"z" * (6 * MiB)))
    source = CountingSource(raw)
    sink = RecordingSink(source)
    rebuild(source, sink, CAPS)
    assert sink.read_at_first_write is not None
    assert sink.read_at_first_write < MiB
    assert [len(e.data) for e in extracted(sink.getvalue())] == [6 * MiB]


NAMES = st.sampled_from(
    ["a", "a/b", "./a", "/a", "../a", "a/../b", "a/./b", "b/", "", ".", "l", "l/x", "a//b",
     "\x00", "x\ny", "f" * 120, "BZh9"]
)  # fmt: skip
KINDS = st.sampled_from(
    [tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE,
     tarfile.FIFOTYPE, tarfile.CHRTYPE]
)  # fmt: skip
MEMBERS = st.builds(
    lambda name, kind, link, mode, data, pax, long: member(
        name, data, kind=kind, link=link, mode=mode, pax={"path": pax} if pax else None,
        gnu_long=long,
    ),
    NAMES, KINDS, st.sampled_from(["", "/", "..", "a", "/etc/passwd"]),
    st.integers(0, 0o7777), st.binary(max_size=1200), st.none() | NAMES, st.booleans(),
)  # fmt: skip


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(MEMBERS, max_size=8), st.integers(0, 4000))
def test_whatever_is_sent_what_goes_on_is_safe(members: list[bytes], cut: int) -> None:
    raw = archive(*members)
    raw = raw[: len(raw) - cut] if cut < len(raw) else raw
    out = io.BytesIO()
    try:
        rebuild(io.BytesIO(raw), out, CAPS)
    except RequestRefused:
        extracted(out.getvalue(), whole=False)
        return
    extracted(out.getvalue())
