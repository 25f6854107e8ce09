"""The runner protocol: every message the host and a sandbox's runner exchange, declared once.

This docstring is the contract between the two sides. The host's `RunnerClient`
(executor/runner_client.py), the backends' streams (executor/stdio.py) and `FakeBackend`
use it on the host; the runner (environments/jupyter/runner/) imports the same files inside
the sandbox image, which is why they import nothing but the standard library. Modules:
`messages` (the declarations), `sealing`, `codec` (encoding, and decoding with junk handled).

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
    user's code writes into the runner's pipes, or replays from them, counts. The runner
    numbers its lines one by one, so the host knows when one of them arrived broken (code
    wrote into the middle of it): a number skipped, within one numbering.

Requests (host to runner), in `REQUESTS`:
    Run        run cells in order, stopping at the first error; answered by `Started` (sent
               before any of its code starts: a stream that ends before it ran nothing),
               `Output`s, then `Done`. One at a time: a second while one runs is ignored
               (with a `Log`).
               `kernel` "beside": in a second kernel (same /mnt/data, its own variables),
               one run at a time too, beside a run of the first that goes on; it starts on
               its first run and ends once neither kernel runs. `language` other than
               "python": that language's kernel (R, JavaScript, TypeScript, Bash), started
               on its first run, with the same /mnt/data; one run at a time in the sandbox,
               and an error result when the image has no such kernel (`Ready.languages`).
               `env` and `cwd` hold for that run only (checked by `run_env`, `run_cwd`).
    Interrupt  SIGINT to the kernel while it works (a resting kernel gets none). No answer.
               `kernel` and `language` say which (see `Run`).
    Export     the session's notebook as nbformat 4 JSON; answered by `Exported` once a run
               in progress has ended.
    Preview    schema previews of tabular files, read in a separate process; `Previewed`.
    Snapshot   the kernel's variables, pickled, and the packages the session installed;
               `SnapshotTaken`. With R's kernel started, R's variables too (R's `save`),
               within the same `max_bytes`; the other languages keep files only.
    Restore    load pickled variables (and the cells they came from); `Restored`. With
               `r_variables`, R's kernel is started and loads them (`load`), and its
               attached packages are attached again.
    Install    install `name==version` packages exactly (a restored workspace's), into the
               packages folder, with the kernel's settings (index, proxy, CA); `Installed`.
    Fs         a file operation in /mnt/data (list, with a `depth`; info, make_dir, remove,
               rename), links never followed (listing a link is refused); `FsDone`. An entry
               has its permission bits, owner and group, and a link its target.
    Env        set environment variables in the kernel; `EnvSet`.
    Claim      remember whose session the sandbox holds. No answer.
    Resume     a host that attached again asks who holds the sandbox; `Resumed`.
    Rekey      replace the key (and, with `reseed`, re-seed the kernel's random
               generators); `Rekeyed`, the first line sealed with the new key.
    InputReply the answer to a run's `InputRequest` (`given` False: none came, and the
               code's `input()` raises EOFError). No answer.
    Keep       keep a run's events (it went on in the background): they stay until the next
               run, and `Resumed.kept` names it. No answer.
    Follow     a host that attached again takes over a kept run: `Following`, then every
               event of the run so far (its outputs, and `Done` if it has ended), then the
               rest as they come.
    Shutdown   stop the kernel and exit.
    ReadChunk  up to `size` bytes (at most MAX_CHUNK_BYTES) of a regular file from
               `offset`; `Chunk`, with the file's size and version, so a file larger than
               a line moves in many. Links, FIFOs, devices refused.
    WriteChunk one chunk of a file written in order into a hidden partial file beside it
               (`upload` names it), put in place by the `last`; a failure or an `abort`
               removes it, so no partial file stays. `Written`.
    Requests that need an answer carry an `id`, which the answer repeats; the host makes it
    long enough that the user's code cannot guess it. Snapshot, Restore, Install and Env
    wait for the kernel's work before them (a run, another of them); Fs, ReadChunk,
    WriteChunk, Preview, Claim and Resume are answered at once, while a run goes on.
    Streamed chunks carry bytes as base64; the decoder refuses (Malformed) a chunk's path
    that is absolute, has `..` or NUL, a size or offset out of bounds, and data that is not
    base64 or is larger than MAX_CHUNK_BYTES.

Events (runner to host), in `EVENTS`:
    Ready first (the kernel started), Warm once the data stack is loaded, Log for a notice
    (at most a few per sandbox), and the answers above. During a `Run` with `stdin`, an
    `InputRequest` (the prompt, and whether `getpass()` asked) each time the code waits for
    input; the code waits until the `InputReply`.

Secrets
    An answer to `getpass()` (`InputRequest.password`) stays in the runner's memory only: the
    runner replaces it with `••••` in every output it sends later (streams, results,
    errors, the exported notebook), and a `Snapshot` leaves out every variable whose pickle
    holds it (skipped, with why). The host never logs it nor keeps it.

Attaching again
    A host that attaches to a running sandbox later (a Kubernetes Pod, after the bot
    restarted, derives the key again) knows the key but not the numbers: it seals its
    `Resume` with a number above any used before (a clock in nanoseconds) and a fresh nonce,
    and takes the sealed `Resumed` repeating that nonce as the start of the runner's
    numbering; nothing before it counts. A run in progress goes on while no host listens
    (its output is written to nobody). `Resumed.busy` says whether one is; `Resumed.kept`
    names a kept run, which the host takes over with `Follow` (`Following.found` False:
    it is not kept, and nothing about it follows), replayed from its start, so the new host
    reports it whole. A busy runner whose run is not kept is interrupted instead: its turn
    was lost with the old host.

Snapshots (memory checkpoints under gVisor)
    A sandbox restored from a checkpoint holds the key and numbers it had when it was
    taken. The host attaches as above (`Resume`, whose answer proves the restored runner
    holds the key: a snapshot of any other sandbox cannot answer) and then, before any
    run, sends `Rekey` with a fresh key: the runner answers `Rekeyed` under the new key,
    numbered from 1 each way, and forgets the old one, so nothing sealed for the snapshot,
    or for another clone of it, is accepted again. Clones of one template are re-seeded too.

Junk
    Each side decodes here and nowhere else. On the runner, a line that is not sealed is
    ignored, and one that is sealed but is not a declared request (`Malformed`: not JSON, an
    unknown `op`, a field of the wrong type) is ignored too; either way the runner says so in
    a `Log`, a limited number of times, and goes on. On the host, an unsealed line is counted
    and dropped by the stream, and `decode_event` turns an unknown or malformed event into
    None, which the client skips; fields are read within bounds, never trusted as given.
    A runner's number skipped (one of its lines broken on the way) is `ChannelDamaged`: the
    run in progress ends saying part of its output may be missing, and the host stops that
    sandbox, since nothing more it says can be taken as whole.
"""

from executor.wire.codec import (
    chunk_bytes,
    decode_event,
    decode_request,
    encode,
    pins,
    run_cwd,
    run_env,
    stream_path,
)
from executor.wire.messages import (
    EVENTS,
    FS_ACTIONS,
    KERNELS,
    LANGUAGES,
    MASKED,
    MAX_CHUNK_BYTES,
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
    FsAction,
    FsDone,
    InputReply,
    InputRequest,
    Install,
    Installed,
    Interrupt,
    Keep,
    Kernel,
    Language,
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
    Shutdown,
    Snapshot,
    SnapshotTaken,
    Started,
    Warm,
    WriteChunk,
    Written,
)
from executor.wire.sealing import (
    KEY_BYTES,
    MAX_SEQ_DIGITS,
    Opener,
    Sealer,
    dumps,
    hello_key,
    hello_line,
    loads,
    seal,
    unseal,
)

__all__ = [
    "EVENTS",
    "FS_ACTIONS",
    "KERNELS",
    "KEY_BYTES",
    "LANGUAGES",
    "MASKED",
    "MAX_CHUNK_BYTES",
    "MAX_FILE_BYTES",
    "MAX_INPUT_CHARS",
    "MAX_LIST",
    "MAX_NAME_CHARS",
    "MAX_PACKAGES",
    "MAX_PATH_CHARS",
    "MAX_PROMPT_CHARS",
    "MAX_SEQ_DIGITS",
    "PACKAGE_PIN",
    "REQUESTS",
    "REQUEST_KINDS",
    "Chunk",
    "Claim",
    "Done",
    "Entry",
    "Env",
    "EnvSet",
    "Event",
    "Export",
    "Exported",
    "Follow",
    "Following",
    "Fs",
    "FsAction",
    "FsDone",
    "InputReply",
    "InputRequest",
    "Install",
    "Installed",
    "Interrupt",
    "Keep",
    "Kernel",
    "Language",
    "Log",
    "Malformed",
    "Opener",
    "Output",
    "Preview",
    "Previewed",
    "ReadChunk",
    "Ready",
    "Rekey",
    "Rekeyed",
    "Request",
    "Restore",
    "Restored",
    "Resume",
    "Resumed",
    "Run",
    "Sealer",
    "Shutdown",
    "Snapshot",
    "SnapshotTaken",
    "Started",
    "Warm",
    "WriteChunk",
    "Written",
    "chunk_bytes",
    "decode_event",
    "decode_request",
    "dumps",
    "encode",
    "hello_key",
    "hello_line",
    "loads",
    "pins",
    "run_cwd",
    "run_env",
    "seal",
    "stream_path",
    "unseal",
]
