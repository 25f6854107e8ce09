"""Encoding and decoding: a message to the JSON object on the line, and back, with unknown
and malformed messages handled here (see the package docstring's "Junk")."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from executor.wire.messages import (
    ENV_NAME,
    EVENTS,
    FS_ACTIONS,
    KERNELS,
    LANGUAGES,
    MAX_CHUNK_BYTES,
    MAX_CWD_CHARS,
    MAX_ENV,
    MAX_ENV_CHARS,
    MAX_FILE_BYTES,
    MAX_INPUT_CHARS,
    MAX_LIST,
    MAX_NAME_CHARS,
    MAX_PACKAGES,
    MAX_PATH_CHARS,
    MAX_PROMPT_CHARS,
    PACKAGE_PIN,
    REQUEST_KINDS,
    REQUESTS,
    Chunk,
    Claim,
    Done,
    Entry,
    Env,
    EnvSet,
    Event,
    Export,
    Exported,
    Follow,
    Following,
    Fs,
    FsDone,
    InputReply,
    InputRequest,
    Install,
    Installed,
    Interrupt,
    Keep,
    Log,
    Malformed,
    Output,
    Preview,
    Previewed,
    ReadChunk,
    Ready,
    Rekey,
    Rekeyed,
    Request,
    Restore,
    Restored,
    Resume,
    Resumed,
    Run,
    Snapshot,
    SnapshotTaken,
    Started,
    Warm,
    WriteChunk,
    Written,
)
from executor.wire.sealing import KEY_BYTES, loads

# A kept run is at most a time limit old; a runner's larger figure would overflow the
# durations the host derives from it (a timedelta of 2**80 ms is an OverflowError).
MAX_ELAPSED_MS = 366 * 24 * 3600 * 1000
UPLOAD_NAME = re.compile(r"[0-9A-Za-z_-]{1,64}")
MAX_CHUNK_TEXT = 4 * -(-MAX_CHUNK_BYTES // 3)
"""The longest base64 text of one chunk's bytes."""


def encode(message: Request | Event) -> dict[str, Any]:
    """A message as the JSON object that goes on the line: its kind first, fields left at
    None omitted."""
    body: dict[str, Any] = (
        {"op": message.op} if isinstance(message, REQUEST_KINDS) else {"type": message.type}
    )
    for item in fields(message):
        value = getattr(message, item.name)
        if value is None:
            continue
        if isinstance(value, tuple):
            value = [_plain(v) for v in value]
        elif isinstance(value, Entry):
            value = _plain(value)
        elif isinstance(value, Mapping):
            value = dict(value)
        elif isinstance(value, bytes):
            value = base64.b64encode(value).decode("ascii")
        body[item.name] = value
    return body


def _plain(value: Any) -> Any:
    if isinstance(value, Entry):
        plain = {
            "path": value.path,
            "type": value.type,
            "size": value.size,
            "modified": value.modified,
            "mode": value.mode,
            "owner": value.owner,
            "group": value.group,
        }
        if value.target is not None:
            plain["target"] = value.target
        return plain
    return value


def decode_request(payload: bytes) -> Request:
    """The request in an opened line; Malformed when it is not a declared one."""
    found = loads(payload)
    if found is None:
        raise Malformed("not a JSON object")
    kind = REQUESTS.get(str(found.get("op")))
    if kind is None:
        raise Malformed(f"unknown request {str(found.get('op'))[:40]!r}")
    read = _Reader(found)
    if kind is Run:
        kernel = read.text("kernel")
        if kernel not in KERNELS:
            raise Malformed(f"unknown kernel {kernel[:40]!r}")
        language = _language(read)
        if language != "python" and kernel:
            raise Malformed("only Python runs beside")
        return Run(
            id=read.text("id"),
            cells=read.texts("cells"),
            output_limit=read.number("output_limit", 1_000_000),
            rich_limit=read.number("rich_limit", 20_000_000),
            rich_count_limit=read.number("rich_count_limit", 100),
            background=read.flag("background"),
            notebook=read.flag("notebook"),
            stdin=read.flag("stdin"),
            keep=read.flag("keep"),
            kernel=kernel,
            language=language,
            env=run_env(read.text_map("env")),
            cwd=run_cwd(read.text("cwd")),
        )
    if kind is Export:
        return Export(id=read.text("id"))
    if kind is Preview:
        return Preview(id=read.text("id"), paths=read.texts("paths"))
    if kind is Snapshot:
        return Snapshot(id=read.text("id"), max_bytes=read.number("max_bytes", 32_000_000))
    if kind is Restore:
        return Restore(
            id=read.text("id"),
            variables=read.text("variables"),
            cells=read.texts("cells"),
            r_variables=read.text("r_variables"),
        )
    if kind is Install:
        packages = read.texts("packages")
        if len(packages) > MAX_PACKAGES:
            raise Malformed(f"more than {MAX_PACKAGES} packages")
        for pin in packages:
            if not PACKAGE_PIN.fullmatch(pin):
                raise Malformed(f"{pin[:60]!r} is not name==version")
        return Install(id=read.text("id"), packages=packages)
    if kind is Fs:
        action = read.text("action")
        if action not in FS_ACTIONS:
            raise Malformed(f"unknown file action {action[:40]!r}")
        return Fs(
            id=read.text("id"),
            action=action,
            path=read.text("path"),
            to=read.text("to"),
            recursive=read.flag("recursive", True),
            depth=bounded(read.number("depth", 0), "depth", 0, 10_000),
        )
    if kind is ReadChunk:
        return ReadChunk(
            id=read.text("id")[:100],
            path=stream_path(read.raw.get("path")),
            offset=bounded(read.number("offset", 0), "offset", 0, MAX_FILE_BYTES),
            size=bounded(read.number("size", 1024 * 1024), "size", 1, MAX_CHUNK_BYTES),
        )
    if kind is WriteChunk:
        upload = read.text("upload")
        if not UPLOAD_NAME.fullmatch(upload):
            raise Malformed("an upload's name is not 1 to 64 letters, digits, _ or -")
        return WriteChunk(
            id=read.text("id")[:100],
            upload=upload,
            path=stream_path(read.raw.get("path")),
            offset=bounded(read.number("offset", 0), "offset", 0, MAX_FILE_BYTES),
            data=chunk_bytes(read.text("data")),
            last=read.flag("last"),
            abort=read.flag("abort"),
        )
    if kind is Env:
        return Env(id=read.text("id"), values=read.text_map("values"))
    if kind is Claim:
        return Claim(session=read.text("session")[:1000])
    if kind is Resume:
        return Resume(nonce=read.text("nonce")[:100])
    if kind is Rekey:
        key = read.text("key")
        if len(key) != 2 * KEY_BYTES or any(c not in "0123456789abcdef" for c in key):
            raise Malformed("a rekey's key is not 64 lowercase hex digits")
        return Rekey(nonce=read.text("nonce")[:100], key=key, reseed=read.flag("reseed"))
    if kind is InputReply:
        value = read.text("value")
        if len(value) > MAX_INPUT_CHARS:
            raise Malformed(f"an input reply longer than {MAX_INPUT_CHARS} characters")
        return InputReply(id=read.text("id"), value=value, given=read.flag("given", True))
    if kind is Interrupt:
        kernel = read.text("kernel")
        if kernel not in KERNELS:
            raise Malformed(f"unknown kernel {kernel[:40]!r}")
        return Interrupt(kernel=kernel, language=_language(read))
    if kind is Keep:
        return Keep(id=read.text("id")[:100])
    if kind is Follow:
        return Follow(id=read.text("id")[:100])
    return kind()  # type: ignore[call-arg]  # Shutdown has no fields


def _language(read: _Reader) -> Any:
    language = read.text("language", "python")
    if language not in LANGUAGES:
        raise Malformed(f"unknown language {language[:40]!r}")
    return language


def run_env(values: Mapping[str, str]) -> dict[str, str]:
    """A run's environment variables as the runner takes them; Malformed otherwise. The
    host checks the same before it sends them (with reasons a person can read)."""
    if len(values) > MAX_ENV:
        raise Malformed(f"more than {MAX_ENV} environment variables")
    if sum(len(k) + len(v) for k, v in values.items()) > MAX_ENV_CHARS:
        raise Malformed(f"environment variables longer than {MAX_ENV_CHARS} characters")
    for name, value in values.items():
        if not ENV_NAME.fullmatch(name):
            raise Malformed(f"{name[:60]!r} is not an environment variable name")
        if "\0" in value:
            raise Malformed(f"the value of {name} has a NUL character")
    return dict(values)


def run_cwd(path: str) -> str:
    """A run's working folder: relative to /mnt/data, without `..`, NUL or empty parts
    (a leading /mnt/data/ is taken off); Malformed otherwise."""
    if len(path) > MAX_CWD_CHARS or "\0" in path:
        raise Malformed("a working folder that is too long or has a NUL character")
    if path == "/mnt/data" or path.startswith("/mnt/data/"):
        path = path.removeprefix("/mnt/data").lstrip("/") or "."
    parts = [part for part in path.strip("/").split("/") if part not in ("", ".")]
    if path.startswith("/") or any(part == ".." for part in parts):
        raise Malformed(f"the working folder {path[:80]!r} is not inside /mnt/data")
    return "/".join(parts)


def decode_event(message: Mapping[str, Any]) -> Event | None:
    """The event in an opened line's JSON object; None when it is not a declared one (the
    host skips it). Every field is read within bounds."""
    kind = EVENTS.get(str(message.get("type")))
    if kind is None:
        return None
    read = _Reader(message, lenient=True)
    try:
        return _event(kind, read)
    except Malformed:
        return None


def _event(kind: type[Event], read: _Reader) -> Event:
    if kind is Ready:
        return Ready(
            python=read.text("python")[:100],
            startup_ms=max(read.number("startup_ms", 0), 0),
            languages=tuple(name for name in LANGUAGES if name in read.texts("languages"))
            or ("python",),
        )
    if kind is Warm:
        return Warm()
    if kind is Log:
        return Log(message=read.text("message")[:1000])
    if kind is Output:
        return Output(
            id=read.text("id"), cell=read.number("cell", 0), output=read.mapping("output")
        )
    if kind is InputRequest:
        return InputRequest(
            id=read.text("id"),
            prompt=read.text("prompt")[:MAX_PROMPT_CHARS],
            password=read.flag("password"),
        )
    if kind is Started:
        return Started(id=read.text("id"))
    if kind is Done:
        count = read.optional_number("execution_count")
        notebook = read.raw.get("notebook")
        return Done(
            id=read.text("id"),
            status=read.text("status", "lost"),
            execution_count=count if count is not None and count > 0 else None,
            truncated=read.flag("truncated"),
            dropped_results=min(max(read.number("dropped_results", 0), 0), 10**9),
            changed=read.texts("changed")[:MAX_LIST],
            exit_code=read.optional_number("exit_code"),
            oom=read.flag("oom"),
            notebook=notebook if isinstance(notebook, Mapping) else None,
        )
    if kind is Exported:
        return Exported(
            id=read.text("id"), content=read.mapping("content"), format=read.text("format", "ipynb")
        )
    if kind is Previewed:
        return Previewed(id=read.text("id"), previews=read.text_map("previews"))
    if kind is Resumed:
        return Resumed(
            nonce=read.text("nonce"),
            session=read.text("session"),
            busy=read.flag("busy"),
            kept=read.text("kept")[:100],
        )
    if kind is Following:
        return Following(
            id=read.text("id"),
            found=read.flag("found"),
            elapsed_ms=min(max(read.number("elapsed_ms", 0), 0), MAX_ELAPSED_MS),
        )
    if kind is Rekeyed:
        return Rekeyed(nonce=read.text("nonce")[:100], reseeded=read.flag("reseeded"))
    if kind is SnapshotTaken:
        return SnapshotTaken(
            id=read.text("id"),
            variables=read.text("variables"),
            saved=read.texts("saved"),
            skipped=read.text_map("skipped"),
            cells=read.texts("cells"),
            packages=pins(read.texts("packages")),
            error=read.optional_text("error"),
            r_variables=read.text("r_variables"),
            r_saved=read.texts("r_saved"),
            r_skipped=read.text_map("r_skipped"),
        )
    if kind is Installed:
        return Installed(id=read.text("id"), ok=read.flag("ok"), error=read.optional_text("error"))
    if kind is Restored:
        return Restored(
            id=read.text("id"),
            restored=read.texts("restored"),
            failed=read.text_map("failed"),
            error=read.optional_text("error"),
            r_restored=read.texts("r_restored"),
            r_failed=read.text_map("r_failed"),
        )
    if kind is FsDone:
        listed = read.raw.get("entries")
        entries = None
        if isinstance(listed, list):
            entries = tuple(e for item in listed[:MAX_LIST] if (e := _entry(item)) is not None)
        return FsDone(
            id=read.text("id"),
            entries=entries,
            entry=_entry(read.raw.get("entry")),
            ok=read.flag("ok"),
            error=read.optional_text("error"),
        )
    if kind is Chunk:
        error = read.optional_text("error")
        try:
            data = chunk_bytes(read.text("data"))
        except Malformed as exc:
            data, error = b"", f"the sandbox sent a broken chunk: {exc}"
        return Chunk(
            id=read.text("id"),
            offset=clamped(read.number("offset", 0), 0, MAX_FILE_BYTES),
            data=data,
            eof=read.flag("eof"),
            size=clamped(read.number("size", 0), 0, MAX_FILE_BYTES),
            version=read.text("version")[:100],
            error=error,
        )
    if kind is Written:
        return Written(
            id=read.text("id"),
            written=clamped(read.number("written", 0), 0, MAX_FILE_BYTES),
            done=read.flag("done"),
            error=read.optional_text("error"),
        )
    return EnvSet(id=read.text("id"), ok=read.flag("ok"))


def stream_path(path: object) -> str:
    """A streamed file's path as the runner takes it: text relative to /mnt/data, naming a
    file in it (not /mnt/data itself), without `..`, NUL or a leading `/`; Malformed
    otherwise."""
    if not isinstance(path, str):
        raise Malformed("a chunk's path is not text")
    parts = path.split("/")
    if (
        not path
        or len(path) > MAX_PATH_CHARS
        or path.startswith("/")
        or "\x00" in path
        or ".." in parts
        or all(part in ("", ".") for part in parts)
    ):
        raise Malformed(f"the path {path[:60]!r} is not a file's path in /mnt/data")
    return path


def chunk_bytes(text: str) -> bytes:
    """A chunk's bytes from their base64 text: at most MAX_CHUNK_BYTES, else Malformed."""
    if len(text) > MAX_CHUNK_TEXT:
        raise Malformed(f"a chunk larger than {MAX_CHUNK_BYTES} bytes")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise Malformed("a chunk's data is not base64") from None


def bounded(value: int, name: str, low: int, high: int) -> int:
    if not low <= value <= high:
        raise Malformed(f"{name} is not between {low} and {high}")
    return value


def clamped(value: int, low: int, high: int) -> int:
    return min(max(value, low), high)


def pins(found: tuple[str, ...]) -> tuple[str, ...]:
    """The `PACKAGE_PIN`s among `found` (a sandbox's, or a store's, word for them), at most
    MAX_PACKAGES, each once."""
    return tuple(dict.fromkeys(p for p in found if PACKAGE_PIN.fullmatch(p)))[:MAX_PACKAGES]


def _entry(item: Any) -> Entry | None:
    if not isinstance(item, Mapping) or item.get("type") not in ("file", "dir", "link"):
        return None
    size, modified, mode = item.get("size"), item.get("modified"), item.get("mode")
    target = item.get("target")
    return Entry(
        path=str(item.get("path", "")),
        type=item["type"],
        size=size if isinstance(size, int) and size >= 0 else 0,
        modified=float(modified) if isinstance(modified, int | float) else 0.0,
        mode=mode & 0o7777 if isinstance(mode, int) and not isinstance(mode, bool) else 0,
        owner=str(item.get("owner", ""))[:MAX_NAME_CHARS],
        group=str(item.get("group", ""))[:MAX_NAME_CHARS],
        target=str(target)[:MAX_PATH_CHARS] if target is not None else None,
    )


class _Reader:
    """Fields of a decoded JSON object, by type. Strict (the runner reading requests): a
    field of the wrong type is Malformed. Lenient (the host reading events): it reads as
    absent, except where the field is the message itself (an Output's output)."""

    def __init__(self, raw: Mapping[str, Any], lenient: bool = False) -> None:
        self.raw = raw
        self.lenient = lenient

    def _get(self, name: str, kinds: type | tuple[type, ...], default: Any) -> Any:
        value = self.raw.get(name, default)
        if value is None or (isinstance(value, bool) and kinds is int):
            return default
        if isinstance(value, kinds):
            return value
        if self.lenient:
            return default
        raise Malformed(f"{name} is not {getattr(kinds, '__name__', kinds)}")

    def text(self, name: str, default: str = "") -> str:
        value = self._get(name, (str, int, float), default)
        return str(value)

    def optional_text(self, name: str) -> str | None:
        value = self.raw.get(name)
        return None if value is None else str(value)[:1000]

    def number(self, name: str, default: int) -> int:
        return int(self._get(name, int, default))

    def optional_number(self, name: str) -> int | None:
        value = self.raw.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def flag(self, name: str, default: bool = False) -> bool:
        return bool(self._get(name, (bool, int), default))

    def texts(self, name: str) -> tuple[str, ...]:
        value = self._get(name, list, [])
        return tuple(str(item) for item in value)

    def mapping(self, name: str) -> Mapping[str, Any]:
        value = self.raw.get(name)
        if not isinstance(value, Mapping):
            raise Malformed(f"{name} is not an object")
        return value

    def text_map(self, name: str) -> dict[str, str]:
        value = self._get(name, dict, {})
        return {str(k): str(v) for k, v in value.items()}


def encode_request(request: Request) -> dict[str, Any]:
    return encode(request)


def encode_event(event: Event) -> dict[str, Any]:
    return encode(event)
