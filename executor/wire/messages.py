"""The protocol's messages: requests (host to runner) and events (runner to host), as frozen
dataclasses; a message's kind is its `op` (requests) or `type` (events)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

MAX_LIST = 20_000
"""The most items of a list in an event that the host reads (changed paths, entries)."""

PACKAGE_PIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}==[A-Za-z0-9][A-Za-z0-9.+!_-]{0,49}")
"""One installed distribution as `Install` and `SnapshotTaken` carry it: `name==version`,
nothing else (no option, URL or path can pass for one)."""
MAX_PACKAGES = 300
MAX_PROMPT_CHARS = 2000
"""The most of an `input()` prompt the host reads."""
MAX_INPUT_CHARS = 4000
"""The longest answer to an `input()` (what a chat's text box takes)."""
MASKED = "••••"
"""What a `getpass()` answer is shown as, by the runner in outputs and by the host."""

Kernel = Literal["", "beside"]
KERNELS: tuple[Kernel, ...] = ("", "beside")
"""The session's kernel (""), and a second one in the same sandbox and /mnt/data for code
run beside a run that goes on (it starts on its first run, and ends when neither runs)."""

Language = Literal["python", "r", "javascript", "typescript", "bash"]
LANGUAGES: tuple[Language, ...] = ("python", "r", "javascript", "typescript", "bash")
"""The languages a run may be in. Python is the session's kernel (and the one beside it);
each other language has a kernel of its own in the same sandbox and /mnt/data, started on
its first run, when the image has it (`Ready.languages`)."""
MAX_ENV = 100
"""The most variables a run's `env` sets."""
MAX_ENV_CHARS = 32_000
"""The most characters of a run's `env`, names and values together."""
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
MAX_CWD_CHARS = 1000
MAX_CHUNK_BYTES = 4 * 1024 * 1024
"""The most bytes one `ReadChunk` asks for, or one `WriteChunk` or `Chunk` carries (base64 on
the line, so a line stays far below either side's line limit)."""
MAX_FILE_BYTES = 2**40
"""The largest offset a chunk may name: past any disk a sandbox has."""
MAX_PATH_CHARS = 4096
MAX_NAME_CHARS = 256
"""The longest owner, group or link target (`MAX_PATH_CHARS`) an `Entry` carries."""

FsAction = Literal["list", "info", "make_dir", "remove", "rename"]
FS_ACTIONS: tuple[FsAction, ...] = ("list", "info", "make_dir", "remove", "rename")


class Malformed(ValueError):
    """A line that is not a message this module declares, or not as declared."""


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
    stdin: bool = False
    """Whether the code may ask for input (`input()`, `getpass()`): each ask is an
    `InputRequest`, answered by an `InputReply`. Without it asking raises
    StdinNotImplementedError, as in any notebook run without a front end."""
    keep: bool = False
    """Kept from the start, as after a `Keep`."""
    kernel: Kernel = ""
    """Which Python kernel runs it (`KERNELS`); one run at a time in each."""
    language: Language = "python"
    """The language of the cells: a kernel other than Python's runs them (`kernel` is then
    ""), one run at a time in the sandbox."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Environment variables for this run only: set before its cells, and back as they were
    after them (`ENV_NAME`, no NUL, within `MAX_ENV` and `MAX_ENV_CHARS`)."""
    cwd: str = ""
    """The working folder for this run only, relative to /mnt/data ("" is /mnt/data); it
    is made if missing, and must not lead out of /mnt/data."""


@dataclass(frozen=True, slots=True)
class Interrupt:
    op: ClassVar[str] = "interrupt"
    kernel: Kernel = ""
    language: Language = "python"


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
    r_variables: str = ""
    """A snapshot's `r_variables` (base64): R's kernel is started to load them."""


@dataclass(frozen=True, slots=True)
class Install:
    op: ClassVar[str] = "install"
    id: str
    packages: tuple[str, ...]
    """`PACKAGE_PIN`s, installed exactly (no dependencies resolved) into the packages
    folder, from the index the sandbox is given."""


@dataclass(frozen=True, slots=True)
class Fs:
    op: ClassVar[str] = "fs"
    id: str
    action: FsAction
    path: str
    to: str = ""
    recursive: bool = True
    depth: int = 0
    """list: how many levels below `path` (1: its own entries); 0: as `recursive` says."""


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
class Rekey:
    op: ClassVar[str] = "rekey"
    nonce: str
    key: str
    """The new key (64 hex digits): every later line, both ways, is sealed with it."""
    reseed: bool = False
    """Re-seed the kernel's random generators from the system's entropy first (a clone of
    a template must not repeat its siblings' numbers)."""


@dataclass(frozen=True, slots=True)
class InputReply:
    op: ClassVar[str] = "input_reply"
    id: str
    """The run whose `InputRequest` this answers."""
    value: str = ""
    given: bool = True
    """False: nobody answered; the code's `input()` raises EOFError."""


@dataclass(frozen=True, slots=True)
class Keep:
    op: ClassVar[str] = "keep"
    id: str
    """The run to keep: its events are kept until the next run, for `Follow`."""


@dataclass(frozen=True, slots=True)
class Follow:
    op: ClassVar[str] = "follow"
    id: str
    """A kept run, which a host that attached again takes over."""


@dataclass(frozen=True, slots=True)
class Shutdown:
    op: ClassVar[str] = "shutdown"


# -- events ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ready:
    type: ClassVar[str] = "ready"
    python: str = ""
    startup_ms: int = 0
    languages: tuple[str, ...] = ("python",)
    """The languages this sandbox's image has a kernel for."""


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
class InputRequest:
    type: ClassVar[str] = "input_request"
    id: str
    """The run whose code waits in `input()` or `getpass()` (asked with `Run.stdin`)."""
    prompt: str = ""
    password: bool = False
    """Asked by `getpass()`: the answer is a secret (see the package docstring)."""


@dataclass(frozen=True, slots=True)
class Started:
    """The runner took the run: its first event, sent before any of its code starts. A
    stream that ends before it ran nothing of the run."""

    type: ClassVar[str] = "started"
    id: str


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
    kept: str = ""
    """The id of a kept run (going on, or ended since), which `Follow` takes over."""


@dataclass(frozen=True, slots=True)
class Following:
    type: ClassVar[str] = "following"
    id: str
    found: bool = False
    """False: no kept run has this id (the runner has run something since, or never kept
    it); nothing more about it follows."""
    elapsed_ms: int = 0
    """How long ago the run started."""


@dataclass(frozen=True, slots=True)
class Rekeyed:
    type: ClassVar[str] = "rekeyed"
    nonce: str
    reseeded: bool = False


@dataclass(frozen=True, slots=True)
class SnapshotTaken:
    type: ClassVar[str] = "snapshot"
    id: str
    variables: str = ""
    saved: tuple[str, ...] = ()
    skipped: Mapping[str, str] = field(default_factory=dict)
    """Variables not saved, with why."""
    cells: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()
    """What the session installed into its packages folder, as `PACKAGE_PIN`s."""
    error: str | None = None
    r_variables: str = ""
    """R's variables (an .RData file written by R's `save`, base64), when its kernel ran;
    within `max_bytes` together with `variables`."""
    r_saved: tuple[str, ...] = ()
    r_skipped: Mapping[str, str] = field(default_factory=dict)
    """R's variables not saved, with why (a failed R save is one entry, "" for its name)."""


@dataclass(frozen=True, slots=True)
class Restored:
    type: ClassVar[str] = "restored"
    id: str
    restored: tuple[str, ...] = ()
    failed: Mapping[str, str] = field(default_factory=dict)
    error: str | None = None
    r_restored: tuple[str, ...] = ()
    r_failed: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Installed:
    type: ClassVar[str] = "installed"
    id: str
    ok: bool = False
    error: str | None = None
    """What the installer said when it failed (its last lines)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry under /mnt/data, as `Fs` lists it."""

    path: str
    type: Literal["file", "dir", "link"]
    size: int = 0
    modified: float = 0.0
    mode: int = 0
    """Permission bits (`st_mode & 0o7777`)."""
    owner: str = ""
    """The owner's name where the sandbox knows it, else the number as text."""
    group: str = ""
    target: str | None = None
    """A link's target, as written in the link (never followed)."""


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


# -- streamed files (appended: requests and events) ------------------------------------------


@dataclass(frozen=True, slots=True)
class ReadChunk:
    """Read up to `size` bytes of a regular file in /mnt/data from `offset`; `Chunk`. Links,
    FIFOs, devices and paths leaving /mnt/data are refused, as `Fs` refuses them."""

    op: ClassVar[str] = "read_chunk"
    id: str
    path: str
    offset: int = 0
    size: int = 1024 * 1024


@dataclass(frozen=True, slots=True)
class WriteChunk:
    """One chunk of a file written in order: the first (offset 0) starts `upload` into a
    hidden partial file beside `path`, each next one continues at the bytes written so far,
    `last` puts the whole file in place (replacing a regular file there), and `abort`
    removes what was written. A failed chunk ends the upload with nothing left behind.
    Answered by `Written`."""

    op: ClassVar[str] = "write_chunk"
    id: str
    upload: str
    """The host's name for this file's upload (the same in all its chunks)."""
    path: str
    offset: int = 0
    data: bytes = b""
    last: bool = False
    abort: bool = False


@dataclass(frozen=True, slots=True)
class Chunk:
    type: ClassVar[str] = "chunk"
    id: str
    offset: int = 0
    data: bytes = b""
    eof: bool = False
    """The file ends after these bytes (as it was when read)."""
    size: int = 0
    """The file's size when this chunk was read."""
    version: str = ""
    """Which file, as it was (inode, modification time): a file replaced or changed between
    chunks reads as another version."""
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Written:
    type: ClassVar[str] = "written"
    id: str
    written: int = 0
    """Bytes of the upload written so far."""
    done: bool = False
    """The file is in place (`last`), or the upload was removed (`abort`)."""
    error: str | None = None


# -- every message ---------------------------------------------------------------------------

Request = (
    Run
    | Interrupt
    | Export
    | Preview
    | Snapshot
    | Restore
    | Install
    | Fs
    | Env
    | Claim
    | Resume
    | Rekey
    | InputReply
    | Keep
    | Follow
    | Shutdown
    | ReadChunk
    | WriteChunk
)
REQUEST_KINDS = (
    Run,
    Interrupt,
    Export,
    Preview,
    Snapshot,
    Restore,
    Install,
    Fs,
    Env,
    Claim,
    Resume,
    Rekey,
    InputReply,
    Keep,
    Follow,
    Shutdown,
    ReadChunk,
    WriteChunk,
)
REQUESTS: dict[str, type[Request]] = {kind.op: kind for kind in REQUEST_KINDS}


Event = (
    Ready
    | Warm
    | Log
    | Output
    | InputRequest
    | Started
    | Done
    | Exported
    | Previewed
    | Resumed
    | Following
    | Rekeyed
    | SnapshotTaken
    | Restored
    | Installed
    | FsDone
    | EnvSet
    | Chunk
    | Written
)
EVENTS: dict[str, type[Event]] = {
    kind.type: kind
    for kind in (
        Ready,
        Warm,
        Log,
        Output,
        InputRequest,
        Started,
        Done,
        Exported,
        Previewed,
        Resumed,
        Following,
        Rekeyed,
        SnapshotTaken,
        Restored,
        Installed,
        FsDone,
        EnvSet,
        Chunk,
        Written,
    )
}
