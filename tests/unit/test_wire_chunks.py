"""The streamed file messages (`ReadChunk`, `WriteChunk`, `Chunk`, `Written`) and the new
entry fields, as the codec reads them: a request the runner would act on has a path that
stays in /mnt/data, sizes and offsets within bounds and base64 bytes no larger than a chunk;
anything else is Malformed. Events from a misbehaving runner are read within bounds."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from executor import wire
from executor.wire.sealing import dumps

PATHS_OUT = [
    "../etc/passwd",
    "a/../../b",
    "a/..",
    "..",
    "/etc/passwd",
    "//etc/passwd",
    "/mnt/data/x",
    "in\x00x",
    "\x00",
    "",
    ".",
    "./",
    "a" * (wire.MAX_PATH_CHARS + 1),
]


def decode(body: dict[str, Any]) -> wire.Request:
    return wire.decode_request(dumps(body))


def read_body(**fields: Any) -> dict[str, Any]:
    return {"op": "read_chunk", "id": "r1", "path": "in/a.bin", **fields}


def write_body(**fields: Any) -> dict[str, Any]:
    return {"op": "write_chunk", "id": "w1", "upload": "u1", "path": "in/a.bin", **fields}


def test_chunk_requests_round_trip() -> None:
    read = wire.ReadChunk(id="r", path="in/a.bin", offset=5, size=100)
    assert decode(wire.encode(read)) == read
    write = wire.WriteChunk(
        id="w", upload="u-1", path="a.bin", offset=3, data=b"\x00\xff", last=True
    )
    encoded = wire.encode(write)
    assert encoded["data"] == base64.b64encode(b"\x00\xff").decode()
    assert decode(encoded) == write
    most = wire.WriteChunk(id="w", upload="u", path="a", data=b"x" * wire.MAX_CHUNK_BYTES)
    assert decode(wire.encode(most)) == most


@pytest.mark.parametrize("path", PATHS_OUT)
def test_a_chunk_whose_path_leaves_mnt_data_is_malformed(path: str) -> None:
    with pytest.raises(wire.Malformed):
        decode(read_body(path=path))
    with pytest.raises(wire.Malformed):
        decode(write_body(path=path, data=""))


@pytest.mark.parametrize("path", [1, 1.5, None, [], {}, True])
def test_a_path_that_is_not_text_is_malformed(path: object) -> None:
    with pytest.raises(wire.Malformed):
        decode(read_body(path=path))


@pytest.mark.parametrize(
    "fields",
    [
        {"size": 0},
        {"size": -1},
        {"size": wire.MAX_CHUNK_BYTES + 1},
        {"size": 2**80},
        {"size": "10"},
        {"size": 1.5},
        {"offset": -1},
        {"offset": wire.MAX_FILE_BYTES + 1},
        {"offset": "0"},
        {"offset": [0]},
    ],
)
def test_a_read_out_of_bounds_is_malformed(fields: dict[str, Any]) -> None:
    with pytest.raises(wire.Malformed):
        decode(read_body(**fields))


@pytest.mark.parametrize(
    "fields",
    [
        {"data": "not base64!"},
        {"data": "AAA"},  # not padded
        {"data": "QUJD\nREVG"},
        {"data": "A" * (4 * (wire.MAX_CHUNK_BYTES // 3 + 2))},
        {"data": 12},
        {"data": ["AA=="]},
        {"upload": ""},
        {"upload": "../x"},
        {"upload": "a b"},
        {"upload": "u" * 65},
        {"upload": "ü"},
        {"offset": -5},
        {"offset": 2**41},
        {"last": "yes"},
    ],
)
def test_a_bad_write_chunk_is_malformed(fields: dict[str, Any]) -> None:
    with pytest.raises(wire.Malformed):
        decode(write_body(**{"data": "", **fields}))


def test_a_list_depth_is_bounded() -> None:
    fs = {"op": "fs", "id": "f", "action": "list", "path": ""}
    request = decode({**fs, "depth": 2})
    assert isinstance(request, wire.Fs)
    assert request.depth == 2
    for depth in (-1, 10**6, "2"):
        with pytest.raises(wire.Malformed):
            decode({**fs, "depth": depth})


def test_a_chunk_event_is_read_within_bounds() -> None:
    chunk = wire.Chunk(id="r", offset=3, data=b"abc", eof=True, size=6, version="1:2:3")
    assert wire.decode_event(wire.encode(chunk)) == chunk
    broken = wire.decode_event({"type": "chunk", "id": "r", "data": "%%%"})
    assert isinstance(broken, wire.Chunk)
    assert broken.data == b""
    assert "broken chunk" in (broken.error or "")
    huge = wire.decode_event({"type": "chunk", "id": "r", "data": "A" * (6 * 1024 * 1024)})
    assert isinstance(huge, wire.Chunk)
    assert (huge.data, bool(huge.error)) == (b"", True)
    odd = wire.decode_event({"type": "chunk", "id": "r", "offset": -4, "size": 2**80})
    assert isinstance(odd, wire.Chunk)
    assert (odd.offset, odd.size) == (0, wire.MAX_FILE_BYTES)
    written = wire.decode_event({"type": "written", "id": "w", "written": -1, "done": 1})
    assert written == wire.Written(id="w", written=0, done=True)


def test_an_entry_carries_mode_owner_group_and_a_links_target() -> None:
    entry = wire.Entry("ln", "link", 0, 1.0, 0o777, "sandbox", "sandbox", "/etc/passwd")
    decoded = wire.decode_event(wire.encode(wire.FsDone(id="f", entry=entry)))
    assert isinstance(decoded, wire.FsDone)
    assert decoded.entry == entry
    forged = wire.decode_event(
        {
            "type": "fs",
            "id": "f",
            "entry": {
                "path": "a",
                "type": "file",
                "mode": 0o170777,
                "owner": "x" * 10_000,
                "group": 7,
                "target": "t" * 10_000,
            },
        }
    )
    assert isinstance(forged, wire.FsDone)
    assert forged.entry is not None
    assert forged.entry.mode == 0o777  # the type bits dropped
    assert len(forged.entry.owner) == wire.MAX_NAME_CHARS
    assert forged.entry.group == "7"
    assert len(forged.entry.target or "") == wire.MAX_PATH_CHARS
    for mode in (True, "755", None, 1.5):
        plain = wire.decode_event(
            {"type": "fs", "id": "f", "entry": {"path": "a", "type": "file", "mode": mode}}
        )
        assert isinstance(plain, wire.FsDone)
        assert plain.entry is not None
        assert plain.entry.mode == 0
