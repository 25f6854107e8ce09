"""The process inside a Cellmate sandbox.

It owns one Jupyter kernel and speaks JSON lines with the host over the container's
attached stdin/stdout, so it works under runc and gVisor alike and needs no socket, port or
shared folder. It is the sandbox's init (PID 1), so nothing else holds the event stream's
descriptors, and it makes itself non-dumpable before it reads a request, so the user's code,
though it runs as the same user, cannot read this process's memory (the key below); under
runc it cannot open its descriptors through /proc either (gVisor lets it, which is why every
line is sealed). The host still caps and validates everything it reports.
Nothing runs between requests, where nothing would count it: when a run (or a restore,
snapshot or `env`) ends, the runner stops the kernel with SIGSTOP, every thread of it, and
only then ends every other process, so that nothing the kernel left running can start one
in between; the next request that needs the kernel continues it (SIGCONT). Not where the
run allows background work, which carries on by design; nor during a new sandbox's warm-up
until code has run in it. The kernel's stderr, like the runner's own, is a pipe of which the
runner keeps a 16 KiB tail: only the protocol reaches the host. Nothing in /mnt/data can
stand in for a module the kernel or the runner imports (see DATA_OFF).

The host chooses the key: its first line on stdin, before any user code exists, is
`{"op": "hello", "key": "<64 hex digits>"}` (a runner that gets anything else exits without
starting). The key never travels on stdout, which an engine may keep. From then on every
line both ways, `ready` first, is sealed: `<hmac-sha256 of "<seq> <json>" under the key,
hex> <seq> <json>`, with `seq` rising in each direction; lines that are not are ignored.

Requests (one JSON object per line on stdin):
    {"op": "run", "id": "r1", "cells": ["code", ...], "output_limit": 1000000,
     "rich_limit": 20000000, "rich_count_limit": 100, "background": false,
     "notebook": false}
                                      run cells in order, stop at the first error
    {"op": "interrupt"}               send SIGINT to the kernel
    {"op": "export", "id": "e1"}      the session's notebook, as nbformat 4 JSON
    {"op": "preview", "id": "p1", "paths": ["sales.csv"]}
                                      schema previews of tabular files, read in a subprocess
    {"op": "snapshot", "id": "s1", "max_bytes": 32000000}
                                      the session's variables (pickled), for a later sandbox
    {"op": "restore", "id": "w1", "variables": "<base64>", "cells": ["code", ...]}
                                      load variables an earlier snapshot saved
    {"op": "fs", "id": "f1", "action": "list|info|make_dir|remove|rename", "path": "a/b",
     "to": "c", "recursive": true}   a file operation in /mnt/data (links never followed)
    {"op": "env", "id": "v1", "values": {"NAME": "value"}}
                                      set environment variables in the kernel
    {"op": "claim", "session": "k"}   remember whose session this sandbox holds
    {"op": "resume", "nonce": "n"}    a host attached again: answer who holds this sandbox
    {"op": "shutdown"}                stop the kernel and exit

Events (one JSON object per line on stdout):
    {"type": "ready", "python": "3.11.2", "startup_ms": 812}
    {"type": "output", "id": "r1", "cell": 0, "output": {nbformat output}}
    {"type": "done", "id": "r1", "status": "ok|error|died", "changed": ["out.csv"],
     "dropped_results": 0, ...}
    {"type": "exported", "id": "e1", "format": "ipynb", "content": {notebook}}
    {"type": "previewed", "id": "p1", "previews": {"sales.csv": "..."}}
    {"type": "resumed", "nonce": "n", "session": "k", "busy": false}
    {"type": "snapshot", "id": "s1", "variables": "<base64>", "saved": ["df"],
     "skipped": {"conn": "an open connection"}, "cells": ["code", ...]}   (or "error")
    {"type": "restored", "id": "w1", "restored": ["df"], "failed": {}}      (or "error")

A host that attaches again later (a Kubernetes Pod's, after a restart, derives the key again)
knows the key but not the sequence numbers: it seals a `resume` with a
higher number than any before (a clock in nanoseconds) and a fresh nonce, and takes the
sealed `resumed` that repeats its nonce as the start of the runner's numbering.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ctypes
import hashlib
import hmac
import json
import os
import resource
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, DeadKernelError

DATA_DIR = Path("/mnt/data")
MPL_CACHE_SEED = Path("/opt/cellmate/mplconfig")
SNAPSHOT_LIMIT = 20_000

# The kernel's sys.path without the data folder, relative entries or anything under /tmp,
# for everything that is not the user's code: the kernel's set-up, the warm-up's imports
# and the workspace scripts (and the variables they load). Files can land in /mnt/data
# without any code being allowed to run (attachments, a restored workspace's files), and
# even last on the path a file there would be found for a module that is not installed
# (pandas tries `bottleneck` and `numexpr`) or beat a namespace package (`mpl_toolkits/`).
# The folder joins the path, last, in the first user cell once the warm-up is over (see
# KERNEL_SETUP), so a module the user saved (helpers.py) imports by its name then, and none
# can stand in for an installed one. The kernel starts with -P, so that its working folder
# is not on the path while it starts either, and -s, so that no user site folder is. An
# expression for the scripts below, with os and sys imported.
DATA_OFF = (
    "[e for e in sys.path if e.startswith('/') and not "
    "(os.path.realpath(e) + '/').startswith(('/mnt/data/', '/tmp/'))]"
)
# Runs silently in the kernel before any user code, and returns at once: the data stack (the
# modules of PRELOAD, from CELLMATE_PRELOAD) is imported and warmed up in a thread of the
# kernel, so a sandbox is ready (and a session's
# first run starts) without waiting for it, while the first chart still finds it loaded
# (code that imports the same modules meanwhile waits for the import to finish). The
# thread stays away from pyplot's figures, which belong to the user's code; chart sizes come
# from the matplotlibrc that the runner writes. A cell that imports (or may import: magics,
# exec) waits for the warm-up to end before it starts: two threads importing at once can
# deadlock Python's import locks (importing pyplot imports the inline backend, which imports
# pyplot), and such code would mostly wait for the data stack's imports anyway. A cell
# without imports runs at once. DataFrames also come as Table
# Schema beside their HTML, whichever thread imported pandas first. It binds no names in
# the user's namespace.
KERNEL_SETUP = """
def _cellmate_setup(mark, preload):
    import ast, os, signal, sys, threading
    # No terminal hangs up here; but the runner stops the kernel between runs, and when a
    # process it killed leaves the kernel's process group orphaned, the system sends the
    # group SIGHUP (see settle).
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    sys.path[:] = DATA_OFF
    from IPython.core.formatters import BaseFormatter
    from traitlets import ObjectName

    class TableSchemaFormatter(BaseFormatter):
        print_method = ObjectName("_repr_data_resource_")
        _return_type = (dict,)

        def __call__(self, obj):
            if not hasattr(type(obj), "_repr_data_resource_"):
                return None
            pandas = sys.modules.get("pandas")
            option = getattr(pandas, "get_option", None)
            if option is not None and not option("display.html.table_schema"):
                pandas.set_option("display.html.table_schema", True)
            return super().__call__(obj)

    formatters = get_ipython().display_formatter.formatters
    formatters["application/vnd.dataresource+json"] = TableSchemaFormatter()

    def warm_up():
        try:
            if "numpy" in preload:
                import numpy
            if "pandas" in preload:
                import pandas
                pandas.set_option("display.html.table_schema", True)
            if "matplotlib" in preload:
                import matplotlib.pyplot
                from matplotlib.backends.backend_agg import FigureCanvasAgg
                from matplotlib.figure import Figure
                figure = Figure()
                FigureCanvasAgg(figure)
                figure.add_subplot().plot([0, 1], [0, 1])
                figure.canvas.draw()
        finally:
            open(mark, "w").close()

    warming = threading.Thread(target=warm_up, name="cellmate-warm-up", daemon=True)
    warming.start()

    # pre_run_cell and post_run_cell fire for the user's cells only (the runner's own
    # scripts run silent): the data folder joins the path, last, in the first user cell
    # that runs once the warm-up is over, so the warm-up's imports never see it.
    user_cell, data_added = [False], [False]

    def user_cell_starts(info):
        user_cell[0] = True

    def user_cell_ends(result):
        user_cell[0] = False

    get_ipython().events.register("pre_run_cell", user_cell_starts)
    get_ipython().events.register("post_run_cell", user_cell_ends)

    class FinishWarmUpBeforeImports(ast.NodeTransformer):
        def visit(self, tree):
            if warming.is_alive() and any(map(imports, ast.walk(tree))):
                try:
                    warming.join(WARM_JOIN_S)
                except KeyboardInterrupt:
                    # Stopped while waiting: the cell stops as any interrupted cell does,
                    # before any of its code ran.
                    stop = ast.Raise(exc=ast.Name(id="KeyboardInterrupt", ctx=ast.Load()))
                    return ast.fix_missing_locations(ast.Module(body=[stop], type_ignores=[]))
            if user_cell[0] and not data_added[0] and not warming.is_alive():
                data_added[0] = True
                if "/mnt/data" not in sys.path:
                    sys.path.append("/mnt/data")
            return tree

    def imports(node):
        name = getattr(node, "id", None) or getattr(node, "attr", None) or ""
        return isinstance(node, (ast.Import, ast.ImportFrom)) or "import" in name or name in (
            "get_ipython", "exec", "eval", "compile", "help"
        )

    get_ipython().ast_transformers.append(FinishWarmUpBeforeImports())
_cellmate_setup(WARM_MARK_PATH, PRELOAD)
del _cellmate_setup
"""
# What the warm-up may import, from CELLMATE_PRELOAD (comma-separated; the host sets it, and
# by default leaves pandas out under gVisor, where its libraries cost each sandbox ~30 MB).
PRELOADABLE = ("numpy", "pandas", "matplotlib")
MATPLOTLIBRC = "figure.dpi: 100\nsavefig.dpi: 100\nfigure.figsize: 8, 5\n"
# The warm-up thread leaves this mark when it is done, and the runner then says `warm`
# (a warm pool hands out only sandboxes that are). Code that makes it early only makes its
# own sandbox count as warm sooner.
WARM_MARK = Path("/tmp/cellmate-warm")  # noqa: S108 (the sandbox's own private tmpfs)
WARM_POLL_S = 0.02
WARM_LIMIT_S = 120
# How long the client waits, after a cell's reply, for the rest of its output. Output still
# on its way when this runs out is lost without a word, so it is generous: the host's own
# time limit is what ends a run.
IOPUB_GRACE_S = 120


# Reads untrusted files with pandas in a separate process (not the user's kernel, whose
# state it must not touch), and prints one JSON object: path -> preview text.
PREVIEW_SCRIPT = r"""
import json, sys
import pandas as pd
ROWS = 5
def read(path):
    lower = path.lower()
    if lower.endswith(".tsv"):
        return pd.read_csv(path, sep="\t", nrows=1000)
    if lower.endswith(".csv"):
        return pd.read_csv(path, nrows=1000, sep=None, engine="python")
    if lower.endswith(".xlsx"):
        return pd.read_excel(path, nrows=1000)
    if lower.endswith(".jsonl"):
        return pd.read_json(path, lines=True, nrows=1000)
    if lower.endswith(".json"):
        return pd.read_json(path)
    if lower.endswith(".parquet"):
        return pd.read_parquet(path)
    raise ValueError("not a tabular file")
previews = {}
for path in sys.argv[1:]:
    try:
        frame = read(path)
        rows = f"{len(frame)} rows" if len(frame) < 1000 else "1000+ rows"
        columns = ", ".join(f"{name} ({dtype})" for name, dtype in frame.dtypes.astype(str).items())
        with pd.option_context("display.width", 120, "display.max_columns", 20):
            head = frame.head(ROWS).to_string(max_colwidth=40)
        previews[path] = f"{path}: {rows}, {frame.shape[1]} columns: {columns}\n{head}"[:3000]
    except Exception as exc:
        problem = f"{type(exc).__name__}: {str(exc)[:200]}"
        previews[path] = f"{path}: could not be read as a table ({problem})"
print(json.dumps(previews))
"""
PREVIEW_TIMEOUT_S = 30
STDERR_TAIL_BYTES = 16 * 1024
STDERR_REPORT_CHARS = 4000
NOTICE_LIMIT = 20
STOP_WAIT_S = 5.0
PR_SET_DUMPABLE = 4
REAP_INTERVAL_S = 1.0
KILL_ROUNDS = 200

# Reaps the kernel's own children that the runner killed at the end of a run (the kernel
# never waits for them itself); only finished ones, so nothing running is touched.
KERNEL_REAP = """
def _cellmate_reap():
    import os
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
_cellmate_reap()
del _cellmate_reap
"""


# Comes before each of the workspace scripts below, which run without the data folder on
# sys.path (whatever an earlier run made of it), so that the modules they and the variables
# import come from the image only.
WITH_DATA_OFF = """
def _cellmate_with_data_off(work):
    import os, sys
    kept = sys.path[:]
    sys.path[:] = DATA_OFF
    try:
        work()
    finally:
        sys.path[:] = kept
""".replace("DATA_OFF", DATA_OFF)

# Saves the user's variables, each pickled on its own (cloudpickle, so functions and classes
# defined in the session come along), into FOLDER: what cannot be saved is named with why.
SNAPSHOT_CODE = """
def _cellmate_snapshot(folder, limit):
    import io, json, os, pickle, socket, threading, types
    import cloudpickle
    shell = get_ipython()
    hidden = set(shell.user_ns_hidden)
    def why(value, exc):
        if isinstance(value, socket.socket) or 'connection' in type(value).__name__.lower():
            return 'an open connection'
        if isinstance(value, io.IOBase):
            return 'an open file'
        if isinstance(value, (types.GeneratorType, types.CoroutineType)):
            return 'a running generator'
        if isinstance(value, type(threading.Lock())) or isinstance(value, threading.Thread):
            return 'a thread or lock'
        return f'cannot be saved: {type(exc).__name__}'
    saved, skipped, blobs, total = [], {}, {}, 0
    for name, value in list(shell.user_ns.items()):
        if name.startswith('_') or name in hidden:
            continue
        if isinstance(value, types.ModuleType):
            skipped[name] = 'a module: import it again'
            continue
        try:
            blob = cloudpickle.dumps(value)
        except Exception as exc:
            skipped[name] = why(value, exc)
            continue
        if total + len(blob) > limit:
            skipped[name] = f'too large ({len(blob) / 1e6:.1f} MB, past the workspace cap)'
            continue
        blobs[name] = blob
        total += len(blob)
        saved.append(name)
    with open(os.path.join(folder, 'variables.pkl'), 'wb') as out:
        pickle.dump(blobs, out)
    with open(os.path.join(folder, 'report.json'), 'w') as out:
        json.dump({'saved': saved, 'skipped': skipped}, out)
_cellmate_with_data_off(lambda: _cellmate_snapshot(FOLDER, LIMIT))
del _cellmate_snapshot, _cellmate_with_data_off
"""

# Loads variables saved by SNAPSHOT_CODE (in an earlier sandbox of the same conversation)
# into the user's namespace, each on its own: one that fails is named, the rest still load.
RESTORE_CODE = """
def _cellmate_restore(folder):
    import json, os, pickle
    import cloudpickle
    namespace = get_ipython().user_ns
    with open(os.path.join(folder, 'variables.pkl'), 'rb') as saved:
        blobs = pickle.load(saved)
    restored, failed = [], {}
    for name, blob in blobs.items():
        try:
            namespace[name] = cloudpickle.loads(blob)
            restored.append(name)
        except Exception as exc:
            failed[name] = f'{type(exc).__name__}: {str(exc)[:100]}'
    with open(os.path.join(folder, 'report.json'), 'w') as out:
        json.dump({'restored': restored, 'failed': failed}, out)
_cellmate_with_data_off(lambda: _cellmate_restore(FOLDER))
del _cellmate_restore, _cellmate_with_data_off
"""
WORKSPACE_TIMEOUT_S = 120


class CappedClient(NotebookClient):  # type: ignore[misc]
    """A notebook client that streams each output to the host and caps what it keeps."""

    def __init__(self, nb: Any, emit: Any, **kw: Any) -> None:
        super().__init__(nb, **kw)
        self.emit = emit
        self.run_id = ""
        self.text_limit = 1_000_000
        self.rich_limit = 20_000_000
        self.rich_count_limit = 100
        self.reset_caps()

    def reset_caps(self) -> None:
        self.text_bytes = 0
        self.rich_bytes = 0
        self.rich_count = 0
        self.dropped = 0
        self.truncated = False

    def output(self, outs: list[Any], msg: dict[str, Any], display_id: Any, cell_index: int) -> Any:
        msg_type = msg["msg_type"]
        content = msg["content"]
        if msg_type == "stream":
            data = str(content.get("text", "")).encode("utf-8", "replace")
            room = self.text_limit - self.text_bytes
            if room <= 0:
                self.truncated = True
                return None
            if len(data) > room:
                # Cut at a byte count, never inside a character.
                data = data[:room].decode("utf-8", "ignore").encode("utf-8")
                self.truncated = True
            content["text"] = data.decode("utf-8")
            self.text_bytes += len(data)
        elif msg_type in ("display_data", "execute_result", "error"):
            if msg_type != "error" and self.rich_count >= self.rich_count_limit:
                self.dropped += 1
                return None
            size = len(json.dumps(content.get("data", content), ensure_ascii=False).encode())
            if self.rich_bytes + size > self.rich_limit:
                self.truncated = True
                return None
            self.rich_bytes += size
            if msg_type != "error":
                self.rich_count += 1
        out = super().output(outs, msg, display_id, cell_index)
        if out is not None:
            self.emit({"type": "output", "id": self.run_id, "cell": cell_index, "output": out})
        return out


class NoKey(Exception):
    """The host did not give a key: without one, nothing can be sealed."""


class StderrTail:
    """Descriptor 2 of the runner and of everything it starts (the kernel and what the user's
    code starts): a pipe that a thread drains, keeping only its last 16 KiB. The container's
    own stderr reaches the host (and the engine's log), so it serves only until the runner
    is ready, to say why a start failed; then nothing writes to it. It stays open, since a
    Kubernetes attach ends when one of the container's streams does; under gVisor the
    user's code can open it through /proc, which is why the host keeps only a tail of it."""

    def __init__(self) -> None:
        self._kept = bytearray()
        self._lock = threading.Lock()
        self._original = os.dup(2)
        self._reporting = True
        read, write = os.pipe()
        os.dup2(write, 2)
        os.close(write)
        threading.Thread(target=self._drain, args=(read,), name="stderr", daemon=True).start()

    def _drain(self, read: int) -> None:
        while chunk := os.read(read, 65536):
            with self._lock:
                self._kept += chunk
                del self._kept[:-STDERR_TAIL_BYTES]

    @property
    def text(self) -> str:
        with self._lock:
            return self._kept.decode("utf-8", "replace")

    def stop_reporting(self) -> None:
        """Once ready: the runner writes nothing more to the container's stderr."""
        self._reporting = False

    def report(self, problem: str) -> None:
        """Why the runner stopped before it was ready, with the tail, on the container's
        stderr (where the host looks when a sandbox ends before its `ready`)."""
        if self._reporting:
            text = f"{self.text[-STDERR_REPORT_CHARS:]}{problem[-STDERR_REPORT_CHARS:]}"
            with contextlib.suppress(OSError):
                os.write(self._original, text.encode("utf-8", "replace"))


class Runner:
    def __init__(self, out: Any, stderr: StderrTail) -> None:
        self.out = out
        self.stderr = stderr
        self.nb = nbformat.v4.new_notebook()
        self.nb.metadata["kernelspec"] = {
            "name": "python3",
            "display_name": "Python 3",
            "language": "python",
        }
        self.client = CappedClient(
            self.nb,
            self.emit,
            timeout=None,
            allow_errors=False,
            kernel_name="python3",
            record_timing=True,
            iopub_timeout=IOPUB_GRACE_S,
            shutdown_kernel="immediate",
        )
        self.running: asyncio.Task[None] | None = None
        self.side_tasks: set[asyncio.Task[None]] = set()
        self.helpers: set[int] = set()
        """Processes the runner itself started (previews), which it waits for itself."""
        self.key: bytes | None = None
        self.session = ""
        """Whose session the host said this sandbox holds, for it to find again later."""
        self.sent = 0
        self.received = 0
        self.notices = 0
        self.kernel_turn = asyncio.Lock()
        """Held while the kernel works for a request, and while it is put to rest after."""
        self.frozen = False
        self.warm = False
        self.user_code_ran = False
        """A run or a restore (the user's code) has run: from then on the kernel rests
        between requests, whether or not the warm-up has finished."""
        self.background = False
        self.reap_in_kernel = False

    def notice(self, message: str) -> None:
        """A `log` event, a limited number of times: lines the user's code may write into the
        runner's stdin (gVisor lets it) must not become a flood of events to the host."""
        self.notices += 1
        if self.notices <= NOTICE_LIMIT:
            self.emit({"type": "log", "message": message})

    def emit(self, event: dict[str, Any]) -> None:
        if self.key is None:
            raise RuntimeError("no event before the host's hello gave the key")
        payload = json.dumps(event, default=str)
        self.sent += 1
        head = str(self.sent)
        mac = hmac.new(self.key, f"{head} {payload}".encode(), hashlib.sha256).hexdigest()
        self.out.write(f"{mac} {head} {payload}\n")

    def open_request(self, line: bytes) -> Any:
        """The request in a line the host sealed, or None."""
        mac, _, rest = line.rstrip(b"\n").partition(b" ")
        head, _, payload = rest.partition(b" ")
        if self.key is None or not head.isdigit() or len(head) > 20:
            return None
        expected = hmac.new(self.key, head + b" " + payload, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(mac, expected.encode()) or int(head) <= self.received:
            return None
        self.received = int(head)
        return json.loads(payload)

    async def start(self, reader: asyncio.StreamReader) -> None:
        started = time.monotonic()
        prepare_writable_dirs()
        self.client.km = self.client.create_kernel_manager()
        spec = self.client.km.kernel_spec
        # `python -P -s -m ipykernel_launcher ...`: see DATA_OFF.
        spec.argv = [spec.argv[0], "-P", "-s", *spec.argv[1:]]
        await self.client.async_start_new_kernel(cwd=str(DATA_DIR))
        await self.client.async_start_new_kernel_client()
        await self.client.kc.execute_interactive(
            KERNEL_SETUP.replace("DATA_OFF", DATA_OFF)
            .replace("WARM_MARK_PATH", repr(str(WARM_MARK)))
            .replace("WARM_JOIN_S", str(WARM_LIMIT_S))
            .replace("PRELOAD", repr(preload_modules())),
            silent=True,
            store_history=False,
        )
        ready = {
            "type": "ready",
            "python": sys.version.split()[0],
            "startup_ms": round((time.monotonic() - started) * 1000),
        }
        # The host may attach only after the start (a Kubernetes Pod), so it speaks first.
        self.key = hello_key(await reader.readline())
        if self.key is None:
            raise NoKey("the host's first line was not a hello with a key: the runner stops")
        self.emit(ready)
        self.stderr.stop_reporting()

    async def run(self, request: dict[str, Any]) -> None:
        run_id = str(request.get("id", ""))
        status = "ok"
        detail: dict[str, Any] = {}
        oom_before = oom_kills()
        before = snapshot()
        self.client.run_id = run_id
        self.client.text_limit = int(request.get("output_limit", 1_000_000))
        self.client.rich_limit = int(request.get("rich_limit", 20_000_000))
        self.client.rich_count_limit = int(request.get("rich_count_limit", 100))
        self.client.reset_caps()
        self.background = bool(request.get("background"))
        self.user_code_ran = True
        async with self.kernel_awake():
            for source in request.get("cells", []):
                cell = nbformat.v4.new_code_cell(str(source))
                self.nb.cells.append(cell)
                index = len(self.nb.cells) - 1
                try:
                    await self.client.async_execute_cell(cell, index)
                except CellExecutionError:
                    status = "error"
                    break
                except DeadKernelError:
                    status = "died"
                    detail = {
                        "exit_code": await kernel_exit_code(self.client),
                        "oom": oom_kills() > oom_before,
                    }
                    break
        after = snapshot()
        changed = sorted(path for path, stamp in after.items() if before.get(path) != stamp)
        if request.get("notebook"):
            detail["notebook"] = self.nb
        counts = [c.get("execution_count") for c in self.nb.cells if c.get("execution_count")]
        self.emit(
            {
                "type": "done",
                "id": run_id,
                "status": status,
                "execution_count": counts[-1] if counts else None,
                "truncated": self.client.truncated,
                "dropped_results": self.client.dropped,
                "changed": changed,
                **detail,
            }
        )

    def kernel_process(self) -> Any:
        """The kernel's Popen, or None."""
        provisioner = getattr(self.client.km, "provisioner", None)
        return getattr(provisioner, "process", None)

    def kernel_pid(self) -> int | None:
        pid = getattr(self.kernel_process(), "pid", None)
        return pid if isinstance(pid, int) else None

    @contextlib.asynccontextmanager
    async def kernel_awake(self) -> AsyncIterator[None]:
        """The kernel runs for the duration of a request (a run, restore, snapshot, `env`),
        and rests after it."""
        async with self.kernel_turn:
            await self.thaw()
            try:
                yield
            finally:
                await self.settle()

    async def thaw(self) -> None:
        process = self.kernel_process()
        if self.frozen and process is not None:
            with contextlib.suppress(OSError):
                os.kill(process.pid, signal.SIGCONT)
        self.frozen = False
        if self.reap_in_kernel:
            self.reap_in_kernel = False
            with contextlib.suppress(Exception):
                await self.client.kc.execute_interactive(
                    KERNEL_REAP, silent=True, store_history=False, timeout=5
                )

    async def settle(self) -> None:
        """Between requests nothing may run, since nothing counts it: the kernel (every
        thread of it) is stopped first, so that it cannot start anything more, and then
        every other process is ended. Not where the host allows background work, nor while
        the warm-up of a sandbox that no code has used yet goes on."""
        if self.background or not (self.warm or self.user_code_ran):
            return
        process = self.kernel_process()
        if not self.frozen and process is not None and process.poll() is None:
            os.kill(process.pid, signal.SIGSTOP)
            self.frozen = True
            await stopped(process)
        if await self.end_leftovers():
            # The kernel's own children that were killed wait for it to reap them, which it
            # does when it runs again.
            self.reap_in_kernel = True
            # An exit that orphans a process group with a stopped member makes the system
            # send that group SIGHUP and SIGCONT (job control): the kernel ignores SIGHUP
            # (KERNEL_SETUP), and is stopped again if it was continued.
            if process is not None and process.poll() is None and not is_stopped(process.pid):
                os.kill(process.pid, signal.SIGSTOP)
                await stopped(process)

    async def settle_when_warm(self) -> None:
        """A new sandbox's kernel rests once its warm-up is done, unless a request uses it."""
        self.warm = True
        async with self.kernel_turn:
            await self.settle()

    async def end_leftovers(self) -> bool:
        """End every process but the runner, the kernel and the runner's helpers: whatever
        the run started (children, daemons, renamed or re-parented ones) is found in /proc
        and killed, again until none is left, since some may fork in between. Whether any
        was."""
        kernel = self.kernel_pid()
        keep = self.helpers | ({kernel} if kernel is not None else set())
        # Most runs start no process: the names in /proc tell that without reading each
        # one's state (every read is a system call, and those are dear under gVisor).
        if pids() <= keep | {os.getpid()}:
            return False
        killed = False
        for _ in range(KILL_ROUNDS):
            # As init, one kill(-1) stops every other process at once, so a chain that forks
            # and exits cannot outrun the scan below; the runner's helpers go on afterwards
            # (the kernel stays stopped: see settle).
            with contextlib.suppress(OSError):
                os.kill(-1, signal.SIGSTOP)
            others = [pid for pid, state, _ in processes() if pid not in keep and state != "Z"]
            for pid in self.helpers:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGCONT)
            if not others:
                break
            killed = True
            for pid in others:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            self.reap()
            await asyncio.sleep(0.005)
        self.reap()
        return killed

    def reap(self) -> None:
        """Wait for orphans that ended: as init, every re-parented process is the runner's."""
        kernel = self.kernel_pid()
        if pids() <= self.helpers | {os.getpid(), kernel}:
            return
        for pid, state, parent in processes():
            if parent == os.getpid() and state == "Z" and pid != kernel and pid not in self.helpers:
                with contextlib.suppress(OSError):
                    os.waitpid(pid, os.WNOHANG)

    async def say_when_warm(self) -> None:
        for _ in range(round(WARM_LIMIT_S / WARM_POLL_S)):
            if WARM_MARK.exists():  # noqa: ASYNC240 (one stat on a tmpfs)
                break
            await asyncio.sleep(WARM_POLL_S)
        self.emit({"type": "warm"})
        await self.settle_when_warm()

    async def reap_loop(self) -> None:
        while True:
            await asyncio.sleep(REAP_INTERVAL_S)
            self.reap()

    def export(self, request: dict[str, Any]) -> None:
        self.emit(
            {"type": "exported", "id": request.get("id", ""), "format": "ipynb", "content": self.nb}
        )

    async def preview(self, request: dict[str, Any]) -> None:
        paths = [str(p) for p in request.get("paths", [])][:20]
        previews: dict[str, str] = {}
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-I",
                "-c",
                PREVIEW_SCRIPT,
                *paths,
                cwd=str(DATA_DIR),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
            )
            self.helpers.add(process.pid)
            output, _ = await asyncio.wait_for(process.communicate(), PREVIEW_TIMEOUT_S)
            previews = json.loads(output or b"{}")
        except (TimeoutError, ValueError, OSError) as exc:
            previews = {path: f"{path}: no preview ({type(exc).__name__})" for path in paths}
            with contextlib.suppress(ProcessLookupError, UnboundLocalError):
                process.kill()
                await process.wait()
        finally:
            with contextlib.suppress(UnboundLocalError):
                self.helpers.discard(process.pid)
        self.emit({"type": "previewed", "id": request.get("id", ""), "previews": previews})

    async def in_kernel(self, code: str, folder: Path) -> dict[str, Any]:
        """Run one of the workspace scripts in the user's kernel; its report."""
        script = WITH_DATA_OFF + code.replace("FOLDER", repr(str(folder)))
        async with self.kernel_awake():
            reply = await self.client.kc.execute_interactive(
                script, silent=True, store_history=False, timeout=WORKSPACE_TIMEOUT_S
            )
        content = reply.get("content", {}) if isinstance(reply, dict) else {}
        if content.get("status") != "ok":
            raise RuntimeError(f"{content.get('ename', 'error')}: {content.get('evalue', '')}")
        report = json.loads((folder / "report.json").read_text())
        return report if isinstance(report, dict) else {}

    async def snapshot(self, request: dict[str, Any]) -> None:
        """The session's variables (pickled in the kernel) and the cells run so far."""
        limit = int(request.get("max_bytes", 32_000_000))
        event: dict[str, Any] = {"type": "snapshot", "id": request.get("id", "")}
        folder = Path(tempfile.mkdtemp(prefix="cellmate-workspace-"))
        try:
            report = await self.in_kernel(SNAPSHOT_CODE.replace("LIMIT", str(limit)), folder)
            variables = read_at_most(folder / "variables.pkl", limit + 1_000_000)
            if len(variables) > limit + 500_000:
                raise ValueError("the saved variables are larger than the cap")
            event.update(
                variables=base64.b64encode(variables).decode(),
                saved=report.get("saved", []),
                skipped=report.get("skipped", {}),
                cells=[str(cell.source) for cell in self.nb.cells][-500:],
            )
        except Exception as exc:
            event["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        self.emit(event)

    async def restore(self, request: dict[str, Any]) -> None:
        """Load saved variables into the kernel, and the cells run before into the notebook."""
        event: dict[str, Any] = {"type": "restored", "id": request.get("id", "")}
        folder = Path(tempfile.mkdtemp(prefix="cellmate-workspace-"))
        try:
            (folder / "variables.pkl").write_bytes(
                base64.b64decode(str(request.get("variables", "")))
            )
            self.user_code_ran = True  # loading a pickle may run any code
            report = await self.in_kernel(RESTORE_CODE, folder)
            event.update(restored=report.get("restored", []), failed=report.get("failed", {}))
            for source in request.get("cells", [])[:500]:
                self.nb.cells.append(nbformat.v4.new_code_cell(str(source)))
        except Exception as exc:
            event["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        self.emit(event)

    async def set_env(self, request: dict[str, Any]) -> None:
        """Set environment variables in the kernel (the host allowed their names)."""
        values = {str(k): str(v) for k, v in dict(request.get("values", {})).items()}
        # repr() makes a Python literal of the JSON text: the values cannot become code.
        script = (
            "import os as _o, json as _j\n"
            f"_o.environ.update(_j.loads({json.dumps(values)!r}))\n"
            "del _o, _j"
        )
        async with self.kernel_awake():
            reply = await self.client.kc.execute_interactive(
                script, silent=True, store_history=False, timeout=30
            )
        content = reply.get("content", {}) if isinstance(reply, dict) else {}
        self.emit({"type": "env", "id": request.get("id", ""), "ok": content.get("status") == "ok"})

    async def interrupt(self) -> None:
        # A resting kernel runs nothing to interrupt; the signal would wait for it, and stop
        # the next request's code instead.
        if self.client.km is not None and not self.frozen:
            await self.client.km.interrupt_kernel()

    async def serve(self) -> None:
        reader = await stdin_reader()
        await self.start(reader)
        reaper = asyncio.create_task(self.reap_loop())
        warming = asyncio.create_task(self.say_when_warm())
        while True:
            line = await reader.readline()
            if not line:
                break
            try:
                request = self.open_request(line)
                if request is None:
                    self.notice("unsealed request ignored")
                    continue
                op = request["op"]
            except (ValueError, KeyError, TypeError):
                self.notice("malformed request ignored")
                continue
            if op == "run":
                if self.running is not None and not self.running.done():
                    self.notice("a run is already in progress")
                    continue
                self.running = asyncio.create_task(self.run(request))
            elif op == "interrupt":
                await self.interrupt()
            elif op == "export":
                if self.running is not None and not self.running.done():
                    await asyncio.wait([self.running])
                self.export(request)
            elif op == "preview":
                self.side_tasks.add(task := asyncio.create_task(self.preview(request)))
                task.add_done_callback(self.side_tasks.discard)
            elif op in ("snapshot", "restore"):
                handler = self.snapshot if op == "snapshot" else self.restore
                self.running = asyncio.create_task(after(self.running, handler(request)))
            elif op == "fs":
                self.emit({"type": "fs", "id": request.get("id", ""), **files_op(request)})
            elif op == "env":
                self.running = asyncio.create_task(after(self.running, self.set_env(request)))
            elif op == "claim":
                self.session = str(request.get("session", ""))[:1000]
            elif op == "resume":
                busy = self.running is not None and not self.running.done()
                self.emit(
                    {
                        "type": "resumed",
                        "nonce": str(request.get("nonce", ""))[:100],
                        "session": self.session,
                        "busy": busy,
                    }
                )
            elif op == "shutdown":
                break
        reaper.cancel()
        warming.cancel()
        if self.running is not None:
            self.running.cancel()
        process = self.kernel_process()
        if self.frozen and process is not None:
            with contextlib.suppress(OSError):
                os.kill(process.pid, signal.SIGCONT)
        await self.client._async_cleanup_kernel()


def snapshot() -> dict[str, tuple[int, int]]:
    """Size and modification time of every regular file under /mnt/data (capped)."""
    found: dict[str, tuple[int, int]] = {}
    for root, dirs, files in os.walk(DATA_DIR):
        dirs.sort()
        for name in sorted(files):
            path = Path(root) / name
            try:
                stat = path.lstat()
            except OSError:
                continue
            found[str(path.relative_to(DATA_DIR))] = (stat.st_size, stat.st_mtime_ns)
            if len(found) >= SNAPSHOT_LIMIT:
                return found
    return found


def pids() -> set[int]:
    return {int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()}


def processes() -> list[tuple[int, str, int]]:
    """(pid, state, parent pid) of every other process in the sandbox."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) >= 2 and fields[1].isdigit():
            found.append((int(entry.name), fields[0], int(fields[1])))
    return found


def preload_modules() -> tuple[str, ...]:
    """The modules the warm-up imports: those of PRELOADABLE that CELLMATE_PRELOAD names (all
    of them where it is not set)."""
    wanted = os.environ.get("CELLMATE_PRELOAD", ",".join(PRELOADABLE)).split(",")
    return tuple(name for name in PRELOADABLE if name in {part.strip() for part in wanted})


def prepare_writable_dirs() -> None:
    for name in ("HOME", "IPYTHONDIR", "JUPYTER_RUNTIME_DIR", "MPLCONFIGDIR", "JUPYTER_DATA_DIR"):
        value = os.environ.get(name)
        if value:
            Path(value).mkdir(parents=True, exist_ok=True)
    # The font cache built into the image saves matplotlib a few seconds on first import.
    mpl_dir = os.environ.get("MPLCONFIGDIR")
    if mpl_dir and MPL_CACHE_SEED.is_dir():
        for seed in MPL_CACHE_SEED.iterdir():
            shutil.copy(seed, Path(mpl_dir) / seed.name)
    if mpl_dir:
        (Path(mpl_dir) / "matplotlibrc").write_text(MATPLOTLIBRC)


def oom_kills() -> int:
    """How often the kernel's memory cgroup has OOM-killed a process (v1 or v2)."""
    for path, key in (
        ("/sys/fs/cgroup/memory.events", "oom_kill"),
        ("/sys/fs/cgroup/memory/memory.oom_control", "oom_kill"),
    ):
        try:
            for line in Path(path).read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
        except (OSError, ValueError):
            continue
    return 0


async def kernel_exit_code(client: NotebookClient) -> int | None:
    provisioner = getattr(client.km, "provisioner", None)
    process = getattr(provisioner, "process", None)
    if process is None:
        return None
    for _ in range(20):
        code = process.poll()
        if code is not None:
            return int(code)
        await asyncio.sleep(0.05)
    return None


def is_stopped(pid: int) -> bool:
    """Whether the process is in the stopped state (T), as /proc shows it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] in ("T", "t")


async def stopped(process: Any) -> None:
    """Wait until every thread of the kernel (the runner's child) has stopped: a thread in
    the middle of a system call stops only when it returns from it."""
    deadline = time.monotonic() + STOP_WAIT_S
    while time.monotonic() < deadline:
        try:  # WNOHANG: never blocks
            pid, status = os.waitpid(process.pid, os.WNOHANG | os.WUNTRACED)  # noqa: ASYNC222
        except ChildProcessError:
            return
        if pid == process.pid:
            if not os.WIFSTOPPED(status):  # it ended: keep its exit code for Popen
                process.returncode = os.waitstatus_to_exitcode(status)
            return
        await asyncio.sleep(0.002)


async def after(previous: asyncio.Task[None] | None, work: Any) -> None:
    """Do `work` (a coroutine) once the kernel has finished what it was doing."""
    if previous is not None and not previous.done():
        await asyncio.wait([previous])
    await work


FS_LIST_LIMIT = 10_000


def files_op(request: dict[str, Any]) -> dict[str, Any]:
    """A file operation in /mnt/data, as the sandbox's user (what it reaches, the user's
    code reaches too): list, info, make_dir, remove, rename. Links are never followed."""
    try:
        action = str(request.get("action", ""))
        path = data_path(str(request.get("path", "")))
        if action == "list":
            return {"entries": list_entries(path, bool(request.get("recursive", True)))}
        if action == "info":
            return {"entry": entry(path)}
        if path == DATA_DIR:
            raise ValueError("that is /mnt/data itself")
        if action == "make_dir":
            path.mkdir(parents=True, exist_ok=True)
        elif action == "remove":
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        elif action == "rename":
            target = data_path(str(request.get("to", "")))
            if target == DATA_DIR or target.exists() or target.is_symlink():
                raise FileExistsError(f"{target.relative_to(DATA_DIR)} already exists")
            target.parent.mkdir(parents=True, exist_ok=True)
            path.rename(target)
        else:
            raise ValueError(f"unknown file action {action!r}")
        return {"ok": True}
    except (OSError, ValueError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}


def data_path(relative: str) -> Path:
    """A path under /mnt/data whose parents are real folders there (no link on the way)."""
    parts = [part for part in relative.split("/") if part not in ("", ".")]
    if ".." in parts or "\x00" in relative:
        raise ValueError(f"{relative!r} leaves /mnt/data")
    path = DATA_DIR
    for part in parts[:-1]:
        path = path / part
        if path.is_symlink():
            raise ValueError(f"{relative!r} goes through a link")
    return path / parts[-1] if parts else DATA_DIR


def entry(path: Path) -> dict[str, Any]:
    stat = path.lstat()
    kind = "link" if path.is_symlink() else "dir" if path.is_dir() else "file"
    return {
        "path": str(path.relative_to(DATA_DIR)),
        "type": kind,
        "size": stat.st_size if kind == "file" else 0,
        "modified": stat.st_mtime,
    }


def list_entries(path: Path, recursive: bool) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    pending = [path]
    while pending and len(found) < FS_LIST_LIMIT:
        folder = pending.pop(0)
        for child in sorted(folder.iterdir()):
            item = entry(child)
            found.append(item)
            if recursive and item["type"] == "dir":
                pending.append(child)
    return found[:FS_LIST_LIMIT]


def read_at_most(path: Path, size: int) -> bytes:
    with path.open("rb") as file:
        return file.read(size)


def hello_key(line: bytes) -> bytes | None:
    """The key in a hello line (`{"op": "hello", "key": "<64 hex digits>"}`), if any."""
    try:
        hello = json.loads(line)
        key = bytes.fromhex(hello["key"]) if hello.get("op") == "hello" else b""
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return key if len(key) == 32 else None


async def stdin_reader() -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=64 * 1024 * 1024)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return reader


def make_unreadable() -> None:
    """Keep the user's code (the same user) out of this process's memory: no
    /proc/<pid>/mem, ptrace or process_vm_readv (under runc no environ or fd either).
    Before the key exists."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise SystemExit(f"cannot make the runner non-dumpable: {os.strerror(ctypes.get_errno())}")


def ignore(signum: int, frame: Any) -> None:
    """An init gets no signal from inside its namespace that it has no handler for; this
    one keeps SIGINT (which Python handles) from ending the runner too."""


def limit_file_size() -> None:
    """Where the engine sets no file size limit (a Kubernetes Pod), the runner sets it for
    itself and every process after it, before any user code; none can raise it again."""
    size = os.environ.get("CELLMATE_FILE_SIZE_BYTES", "")
    if size.isdigit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(size), int(size)))


def main() -> None:
    make_unreadable()
    limit_file_size()
    signal.signal(signal.SIGINT, ignore)
    # Events go to a private copy of stdout; whatever else writes to descriptor 1 (the
    # kernel's children inherit it) goes nowhere.
    out = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    stderr = StderrTail()
    try:
        asyncio.run(Runner(out, stderr).serve())
    except NoKey as exc:
        stderr.report(f"{exc}\n")
        raise SystemExit(2) from None
    except BaseException:
        stderr.report(traceback.format_exc())
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
