from __future__ import annotations

import io
import tarfile

import pytest

from executor.archive import OutputCaps, build_input_tar, read_output_tar, validate_input_name
from executor.errors import InvalidInput

CAPS = OutputCaps(max_files=3, max_file_bytes=100, max_total_bytes=150, max_depth=2)


def archive(*members: tuple[str, bytes | None, bytes]) -> io.BytesIO:
    """A tar as `get_archive('/mnt/data')` returns it: every name below `data/`."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, kind, payload in members:
            info = tarfile.TarInfo(name)
            if kind is None:
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
            else:
                info.type = kind
                info.linkname = payload.decode()
                tar.addfile(info)
    buffer.seek(0)
    return buffer


def test_regular_files_come_back_below_the_folder() -> None:
    found = read_output_tar(
        archive(("data", tarfile.DIRTYPE, b""), ("data/a.csv", None, b"1,2")), CAPS
    )
    assert [(f.path, f.content) for f in found.files] == [("a.csv", b"1,2")]
    assert found.skipped == []


@pytest.mark.parametrize(
    ("member", "reason"),
    [
        (("data/link", tarfile.SYMTYPE, b"/etc/passwd"), "a link (to '/etc/passwd')"),
        (("data/hard", tarfile.LNKTYPE, b"data/a"), "a link"),
        (("data/fifo", tarfile.FIFOTYPE, b""), "named pipe"),
        (("data/tty", tarfile.CHRTYPE, b""), "a device"),
        (("data/disk", tarfile.BLKTYPE, b""), "a device"),
        (("data/../../etc/cron", None, b"x"), "path leaves /mnt/data"),
        (("data/a/b/c/deep", None, b"x"), "nested deeper than 2 folders"),
    ],
)
def test_anything_but_a_plain_file_is_refused(
    member: tuple[str, bytes | None, bytes], reason: str
) -> None:
    found = read_output_tar(archive(member), CAPS)
    assert found.files == []
    assert len(found.skipped) == 1
    assert reason in found.skipped[0].reason


def test_size_and_count_caps() -> None:
    found = read_output_tar(
        archive(
            ("data/big", None, b"x" * 101),
            ("data/a", None, b"a" * 80),
            ("data/b", None, b"b" * 80),
            ("data/c", None, b"c"),
            ("data/d", None, b"d"),
            ("data/e", None, b"e"),
        ),
        CAPS,
    )
    assert [f.path for f in found.files] == ["a", "c", "d"]
    assert {s.path: s.reason for s in found.skipped} == {
        "big": "larger than 0 MB",
        "b": "output files together exceed 0 MB",
    }
    assert found.over_count == 1


def test_unchanged_inputs_are_not_outputs() -> None:
    found = read_output_tar(
        archive(("data/in.csv", None, b"same"), ("data/edited.csv", None, b"new")),
        CAPS,
        unchanged={"in.csv": b"same", "edited.csv": b"old"},
    )
    assert [f.path for f in found.files] == ["edited.csv"]


@pytest.mark.parametrize(
    "name", ["../x", "/etc/passwd", "a/b", "a\\b", "..", ".", "", "bad\nname", "x" * 300]
)
def test_bad_input_names(name: str) -> None:
    with pytest.raises(InvalidInput, match="input file name"):
        validate_input_name(name)


def test_input_tar_holds_plain_files_for_the_sandbox_user() -> None:
    data = build_input_tar(
        {"sales.csv": b"a,b\n", "Ünïcode name.txt": b"x"}, max_files=5, max_total_bytes=100
    )
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = tar.getmembers()
    assert [(m.name, m.uid, m.gid, m.mode, m.isreg()) for m in members] == [
        ("sales.csv", 61000, 61000, 0o644, True),
        ("Ünïcode name.txt", 61000, 61000, 0o644, True),
    ]


def test_input_tar_for_another_sandbox_user() -> None:
    data = build_input_tar({"a.txt": b"a"}, max_files=5, max_total_bytes=100, uid=62000, gid=62001)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert [(m.uid, m.gid) for m in tar.getmembers()] == [(62000, 62001)]


def test_only_the_wanted_paths_are_read() -> None:
    found = read_output_tar(
        archive(
            ("data/keep.txt", None, b"keep"),
            ("data/sub/also.txt", None, b"also"),
            ("data/other.txt", None, b"other"),
            ("data/passwd", tarfile.SYMTYPE, b"/etc/passwd"),
        ),
        CAPS,
        wanted={"keep.txt", "sub/also.txt", "passwd", "missing.txt"},
    )
    assert [(f.path, f.content) for f in found.files] == [
        ("keep.txt", b"keep"),
        ("sub/also.txt", b"also"),
    ]
    assert [s.path for s in found.skipped] == ["passwd"]


def test_input_caps() -> None:
    with pytest.raises(InvalidInput, match="at most 1 are allowed"):
        build_input_tar({"a": b"", "b": b""}, max_files=1, max_total_bytes=100)
    with pytest.raises(InvalidInput, match="MB are allowed"):
        build_input_tar({"a": b"x" * 101}, max_files=5, max_total_bytes=100)
