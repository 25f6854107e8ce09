"""The runner protocol: every message the host and a sandbox's runner exchange, declared once.

This module is the contract between the two sides. The host's `RunnerClient`
(executor/runner_client.py), the backends' streams (executor/stdio.py) and `FakeBackend`
use it on the host; the runner (environments/jupyter/runner/) imports the same file inside
the sandbox image, which is why it imports nothing but the standard library.

Transport
    JSON lines over the sandbox's attached stdin (host to runner) and stdout (runner to
    host), one message per line, UTF-8. Nothing else reaches the host: the runner keeps its
    own and the kernel's stderr as a short tail of its own.

Handshake and sealing
    The host chooses a 32-byte key per sandbox. Its first line on stdin, before any user
    code exists, is unsealed: `{"op": "hello", "key": "<64 hex digits>"}` (`hello_line`).
    A runner whose first line is anything else exits without starting. The key never
    travels on stdout, which an engine may keep.
    Every later line, both ways, is sealed (`seal`): `<hmac-sha256 hex> <seq> <json>`, the
    MAC taken under the key over `"<seq> <json>"`, with `seq` (at most 20 digits) rising in
    each direction on its own. A line whose MAC is wrong, or whose number is not above the
    last one accepted, is not the other side's: it is ignored (`unseal`), so nothing the
    user's code writes into the runner's pipes, or replays from them, counts.

Requests (host to runner), in `REQUESTS`:
    Run        run cells in order, stopping at the first error; answered by `Output`s, then
               `Done`. One at a time: a second while one runs is ignored (with a `Log`).
    Interrupt  SIGINT to the kernel while it works (a resting kernel gets none). No answer.
    Export     the session's notebook as nbformat 4 JSON; answered by `Exported` once a run
               in progress has ended.
    Preview    schema previews of tabular files, read in a separate process; `Previewed`.
    Snapshot   the kernel's variables, pickled; `SnapshotTaken`.
    Restore    load pickled variables (and the cells they came from); `Restored`.
    Fs         a file operation in /mnt/data (list, info, make_dir, remove, rename), links
               never followed; `FsDone`.
    Env        set environment variables in the kernel; `EnvSet`.
    Claim      remember whose session the sandbox holds. No answer.
    Resume     a host that attached again asks who holds the sandbox; `Resumed`.
    Shutdown   stop the kernel and exit.
    Requests that need an answer carry an `id`, which the answer repeats; the host makes it
    long enough that the user's code cannot guess it. Snapshot, Restore and Env wait for the
    kernel's work before them (a run, another of them); Fs, Preview, Claim and Resume are
    answered at once, while a run goes on.

Events (runner to host), in `EVENTS`:
    Ready first (the kernel started), Warm once the data stack is loaded, Log for a notice
    (at most a few per sandbox), and the answers above.

Attaching again
    A host that attaches to a running sandbox later (a Kubernetes Pod, after the bot
    restarted, derives the key again) knows the key but not the numbers: it seals its
    `Resume` with a number above any used before (a clock in nanoseconds) and a fresh nonce,
    and takes the sealed `Resumed` repeating that nonce as the start of the runner's
    numbering; nothing before it counts.

Junk
    Each side decodes here and nowhere else. On the runner, a line that is not sealed is
    ignored, and one that is sealed but is not a declared request (`Malformed`: not JSON, an
    unknown `op`, a field of the wrong type) is ignored too; either way the runner says so in
    a `Log`, a limited number of times, and goes on. On the host, an unsealed line is counted
    and dropped by the stream, and `decode_event` turns an unknown or malformed event into
    None, which the client skips; fields are read within bounds, never trusted as given.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Literal

KEY_BYTES = 32
MAX_SEQ_DIGITS = 20
MAX_LIST = 20_000
"""The most items of a list in an event that the host reads (changed paths, entries)."""

FsAction = Literal["list", "info", "make_dir", "remove", "rename"]
FS_ACTIONS: tuple[FsAction, ...] = ("list", "info", "make_dir", "remove", "rename")
RunStatus = Literal["ok", "error", "died"]


class Malformed(ValueError):
    """A line that is not a message this module declares, or not as declared."""


# -- sealing ---------------------------------------------------------------------------------


def seal(key: bytes, seq: int, payload: bytes) -> bytes:
    """One sealed line (with its newline)."""
    head = str(seq).encode()
    mac = hmac.new(key, head + b" " + payload, hashlib.sha256).hexdigest().encode()
    return mac + b" " + head + b" " + payload + b"\n"


def unseal(key: bytes, line: bytes, last_seq: int) -> tuple[int, bytes] | None:
    """The number and payload of a line sealed with `key` after `last_seq`; None for any
    other line."""
    mac, _, rest = line.rstrip(b"\n").partition(b" ")
    head, _, payload = rest.partition(b" ")
    if not head.isdigit() or len(head) > MAX_SEQ_DIGITS:
        return None
    expected = hmac.new(key, head + b" " + payload, hashlib.sha256).hexdigest().encode()
    if not hmac.compare_digest(mac, expected) or int(head) <= last_seq:
        return None
    return int(head), payload


def hello_line(key: bytes) -> bytes:
    """The host's first line: the key, unsealed (before any user code exists)."""
    return json.dumps({"op": "hello", "key": key.hex()}).encode() + b"\n"


def hello_key(line: bytes) -> bytes | None:
    """The key in a hello line, if it is one."""
    try:
        hello = json.loads(line)
        key = bytes.fromhex(hello["key"]) if hello.get("op") == "hello" else b""
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return key if len(key) == KEY_BYTES else None


def dumps(message: Mapping[str, Any]) -> bytes:
    """A message's JSON (what a line seals). Values JSON has no type for become strings."""
    return json.dumps(message, default=str).encode()


def loads(payload: bytes) -> dict[str, Any] | None:
    """The JSON object of an opened line, or None."""
    try:
        found = json.loads(payload)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


class Sealer:
    """One side's outgoing numbering under a key."""

    def __init__(self, key: bytes, seq: int = 0) -> None:
        self.key = key
        self.seq = seq

    def line(self, message: Mapping[str, Any]) -> bytes:
        self.seq += 1
        return seal(self.key, self.seq, dumps(message))


class Opener:
    """One side's incoming numbering under a key: only lines sealed with a higher number."""

    def __init__(self, key: bytes, seq: int = 0) -> None:
        self.key = key
        self.seq = seq

    def open(self, line: bytes) -> bytes | None:
        opened = unseal(self.key, line, self.seq)
        if opened is None:
            return None
        self.seq, payload = opened
        return payload


# -- requests --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Run:
    op: ClassVar[str] = "run"
    id: str
    cells: tuple[str, ...]
    output_limit: int = 1_000_000
    rich_limit: int = 20_000_000
    rich_count_limit: int = 100
    background: bool = False
    notebook: bool = False
    """Whether `Done` carries the notebook."""


@dataclass(frozen=True, slots=True)
class Interrupt:
    op: ClassVar[str] = "interrupt"


@dataclass(frozen=True, slots=True)
class Export:
    op: ClassVar[str] = "export"
    id: str


@dataclass(frozen=True, slots=True)
class Preview:
    op: ClassVar[str] = "preview"
    id: str
    paths: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Snapshot:
    op: ClassVar[str] = "snapshot"
    id: str
    max_bytes: int = 32_000_000


@dataclass(frozen=True, slots=True)
class Restore:
    op: ClassVar[str] = "restore"
    id: str
    variables: str
    """A snapshot's `variables` (base64)."""
    cells: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Fs:
    op: ClassVar[str] = "fs"
    id: str
    action: FsAction
    path: str
    to: str = ""
    recursive: bool = True


@dataclass(frozen=True, slots=True)
class Env:
    op: ClassVar[str] = "env"
    id: str
    values: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Claim:
    op: ClassVar[str] = "claim"
    session: str


@dataclass(frozen=True, slots=True)
class Resume:
    op: ClassVar[str] = "resume"
    nonce: str


@dataclass(frozen=True, slots=True)
class Shutdown:
    op: ClassVar[str] = "shutdown"


Request = (
    Run | Interrupt | Export | Preview | Snapshot | Restore | Fs | Env | Claim | Resume | Shutdown
)
REQUEST_KINDS = (
    Run,
    Interrupt,
    Export,
    Preview,
    Snapshot,
    Restore,
    Fs,
    Env,
    Claim,
    Resume,
    Shutdown,
)
REQUESTS: dict[str, type[Request]] = {kind.op: kind for kind in REQUEST_KINDS}


# -- events ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ready:
    type: ClassVar[str] = "ready"
    python: str = ""
    startup_ms: int = 0


@dataclass(frozen=True, slots=True)
class Warm:
    type: ClassVar[str] = "warm"


@dataclass(frozen=True, slots=True)
class Log:
    type: ClassVar[str] = "log"
    message: str = ""


@dataclass(frozen=True, slots=True)
class Output:
    type: ClassVar[str] = "output"
    id: str
    cell: int
    output: Mapping[str, Any]
    """One nbformat output."""


@dataclass(frozen=True, slots=True)
class Done:
    type: ClassVar[str] = "done"
    id: str
    status: str
    """ok, error (a cell raised), died (the kernel)."""
    execution_count: int | None = None
    truncated: bool = False
    dropped_results: int = 0
    """Rich results not sent, past the run's count."""
    changed: tuple[str, ...] = ()
    """Files under /mnt/data the run created or changed (what the runner saw)."""
    exit_code: int | None = None
    oom: bool = False
    notebook: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Exported:
    type: ClassVar[str] = "exported"
    id: str
    content: Mapping[str, Any]
    format: str = "ipynb"


@dataclass(frozen=True, slots=True)
class Previewed:
    type: ClassVar[str] = "previewed"
    id: str
    previews: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Resumed:
    type: ClassVar[str] = "resumed"
    nonce: str
    session: str = ""
    busy: bool = False


@dataclass(frozen=True, slots=True)
class SnapshotTaken:
    type: ClassVar[str] = "snapshot"
    id: str
    variables: str = ""
    saved: tuple[str, ...] = ()
    skipped: Mapping[str, str] = field(default_factory=dict)
    """Variables not saved, with why."""
    cells: tuple[str, ...] = ()
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Restored:
    type: ClassVar[str] = "restored"
    id: str
    restored: tuple[str, ...] = ()
    failed: Mapping[str, str] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry under /mnt/data, as `Fs` lists it."""

    path: str
    type: Literal["file", "dir", "link"]
    size: int = 0
    modified: float = 0.0


@dataclass(frozen=True, slots=True)
class FsDone:
    type: ClassVar[str] = "fs"
    id: str
    entries: tuple[Entry, ...] | None = None
    """list's answer."""
    entry: Entry | None = None
    """info's answer."""
    ok: bool = False
    """make_dir, remove or rename done."""
    error: str | None = None


@dataclass(frozen=True, slots=True)
class EnvSet:
    type: ClassVar[str] = "env"
    id: str
    ok: bool = False


Event = (
    Ready
    | Warm
    | Log
    | Output
    | Done
    | Exported
    | Previewed
    | Resumed
    | SnapshotTaken
    | Restored
    | FsDone
    | EnvSet
)
EVENTS: dict[str, type[Event]] = {
    kind.type: kind
    for kind in (
        Ready,
        Warm,
        Log,
        Output,
        Done,
        Exported,
        Previewed,
        Resumed,
        SnapshotTaken,
        Restored,
        FsDone,
        EnvSet,
    )
}


# -- encoding --------------------------------------------------------------------------------


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
        body[item.name] = value
    return body


def _plain(value: Any) -> Any:
    if isinstance(value, Entry):
        return {
            "path": value.path,
            "type": value.type,
            "size": value.size,
            "modified": value.modified,
        }
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
        return Run(
            id=read.text("id"),
            cells=read.texts("cells"),
            output_limit=read.number("output_limit", 1_000_000),
            rich_limit=read.number("rich_limit", 20_000_000),
            rich_count_limit=read.number("rich_count_limit", 100),
            background=read.flag("background"),
            notebook=read.flag("notebook"),
        )
    if kind is Export:
        return Export(id=read.text("id"))
    if kind is Preview:
        return Preview(id=read.text("id"), paths=read.texts("paths"))
    if kind is Snapshot:
        return Snapshot(id=read.text("id"), max_bytes=read.number("max_bytes", 32_000_000))
    if kind is Restore:
        return Restore(
            id=read.text("id"), variables=read.text("variables"), cells=read.texts("cells")
        )
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
        )
    if kind is Env:
        return Env(id=read.text("id"), values=read.text_map("values"))
    if kind is Claim:
        return Claim(session=read.text("session")[:1000])
    if kind is Resume:
        return Resume(nonce=read.text("nonce")[:100])
    return kind()  # type: ignore[call-arg]  # Interrupt and Shutdown have no fields


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
            python=read.text("python")[:100], startup_ms=max(read.number("startup_ms", 0), 0)
        )
    if kind is Warm:
        return Warm()
    if kind is Log:
        return Log(message=read.text("message")[:1000])
    if kind is Output:
        return Output(
            id=read.text("id"), cell=read.number("cell", 0), output=read.mapping("output")
        )
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
            nonce=read.text("nonce"), session=read.text("session"), busy=read.flag("busy")
        )
    if kind is SnapshotTaken:
        return SnapshotTaken(
            id=read.text("id"),
            variables=read.text("variables"),
            saved=read.texts("saved"),
            skipped=read.text_map("skipped"),
            cells=read.texts("cells"),
            error=read.optional_text("error"),
        )
    if kind is Restored:
        return Restored(
            id=read.text("id"),
            restored=read.texts("restored"),
            failed=read.text_map("failed"),
            error=read.optional_text("error"),
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
    return EnvSet(id=read.text("id"), ok=read.flag("ok"))


def _entry(item: Any) -> Entry | None:
    if not isinstance(item, Mapping) or item.get("type") not in ("file", "dir", "link"):
        return None
    size, modified = item.get("size"), item.get("modified")
    return Entry(
        path=str(item.get("path", "")),
        type=item["type"],
        size=size if isinstance(size, int) and size >= 0 else 0,
        modified=float(modified) if isinstance(modified, int | float) else 0.0,
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
