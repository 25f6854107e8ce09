"""A saved workspace is read as untrusted: only plain relative files come out, within caps;
the note for the user names what came back and what did not."""

from __future__ import annotations

import io
import json
import tarfile
import time

import pytest

from bot.sandbox_words import restored_note
from executor.archive import build_workspace_tar
from executor.errors import InvalidInput, WorkspaceError
from executor.workspace import Workspace, pack, unpack


def tampered(*members: tuple[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        manifest = json.dumps({"created": time.time(), "saved": ["x"]}).encode()
        for name, content in (("manifest.json", manifest), *members):
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
        link = tarfile.TarInfo("files/link")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    return buffer.getvalue()


def test_a_workspace_round_trips() -> None:
    workspace = Workspace(
        created=1.0,
        variables=b"pickled",
        saved=("df",),
        skipped={"conn": "an open connection"},
        cells=("df = 1",),
        files={"a.csv": b"1", "out/b.txt": b"2"},
    )
    assert unpack(pack(workspace), 10, 10_000) == workspace


def test_r_variables_round_trip_and_are_named_beside_python_s() -> None:
    workspace = Workspace(
        created=1.0,
        variables=b"pickled",
        saved=("df",),
        r_variables=b"RDX3 saved",
        r_saved=("model", "my.frame"),
        files={"a.csv": b"1"},
    )
    back = unpack(pack(workspace), 10, 10_000)
    assert back == workspace
    assert back.names == ["df", "model (R)", "my.frame (R)", "a.csv"]


def test_an_r_variables_member_counts_against_the_cap() -> None:
    with pytest.raises(WorkspaceError, match="larger than the cap"):
        unpack(tampered(("variables.RData", b"0" * 5000)), 10, 1000)


def test_paths_that_leave_the_folder_and_links_never_come_out() -> None:
    data = tampered(
        ("files/../../etc/cron", b"x"),
        ("files//abs", b"x"),
        ("files/ok.txt", b"fine"),
        ("elsewhere.txt", b"x"),
    )
    assert unpack(data, 10, 10_000).files == {"ok.txt": b"fine"}


@pytest.mark.parametrize(
    ("data", "caps", "why"),
    [
        (tampered(*((f"files/f{i}", b"") for i in range(5))), (3, 10_000), "too many files"),
        (tampered(("files/big", b"0" * 5000)), (10, 1000), "larger than the cap"),
        (b"not a tar at all", (10, 1000), "cannot be read"),
        (pack(Workspace(created=1.0))[:100], (10, 1000), "cannot be read"),
    ],
)
def test_broken_or_oversized_workspaces_are_refused(
    data: bytes, caps: tuple[int, int], why: str
) -> None:
    with pytest.raises(WorkspaceError, match=why):
        unpack(data, *caps)


@pytest.mark.parametrize("path", ["../x", "a/../../x", "/etc/x", "a//b", "a/\x07"])
def test_restored_files_are_checked_part_by_part(path: str) -> None:
    with pytest.raises(InvalidInput):
        build_workspace_tar({path: b"x"})


def test_folders_come_back_owned_by_the_sandbox_user() -> None:
    with tarfile.open(fileobj=io.BytesIO(build_workspace_tar({"out/c/d.txt": b"x"}, 7, 8))) as t:
        assert [(m.name, m.isdir(), m.uid, m.gid) for m in t] == [
            ("out", True, 7, 8),
            ("out/c", True, 7, 8),
            ("out/c/d.txt", False, 7, 8),
        ]


def test_the_note_names_what_came_back_and_what_did_not() -> None:
    workspace = Workspace(
        created=time.time() - 2 * 3600,
        saved=("df", "model", "f"),
        skipped={"conn": "an open connection"},
        files={"sales.csv": b""},
    )
    note = restored_note(workspace, ["df", "model"], {"f": "AttributeError: gone"})
    assert note == (
        "Restored your workspace from 2 h ago: df, model, sales.csv; not restored: "
        "conn (an open connection), f (AttributeError: gone)."
    )
