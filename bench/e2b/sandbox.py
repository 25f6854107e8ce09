"""E2B's `Sandbox` and `AsyncSandbox` over Cellmate's `Executor` sessions.

One executor per process runs on an event loop in a background thread; both front ends hand
their calls to it, and output callbacks come back to the caller (its thread, or its event
loop for `AsyncSandbox`, where they may be coroutines). A sandbox is a session key; a code
context made with `create_code_context` is a session of its own (its own sandbox: Cellmate
has one kernel per session, so contexts do not share files). E2B's working folder
/home/user is Cellmate's /mnt/data.

Features of `Session.run` that Cellmate may not have yet are looked up in its signature:
`language=` (other kernels than Python), `env=` (variables for one run), `cwd=` (a folder
in /mnt/data). Without them, a call that needs them raises `InvalidArgumentException`
saying so. Settings come from the environment: CELLMATE_E2B_RUNTIME (runc), CELLMATE_E2B_POOL
(ready sandboxes, 1), CELLMATE_E2B_MAX_LIVE (4), CELLMATE_E2B_INSTANCE (the sandboxes'
instance label: by default one per checkout, and per test worker).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import hashlib
import inspect
import json
import os
import queue
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, ClassVar, TypeVar

from bench.e2b.errors import (
    CommandExitException,
    InvalidArgumentException,
    NotFoundException,
    SandboxException,
    TimeoutException,
)
from bench.e2b.models import Context, Execution, ExecutionError, Logs, OutputMessage, Result
from executor import (
    ExecutionResult,
    Executor,
    FileInfo,
    InvalidInput,
    OutputEvent,
    PoolSettings,
    SandboxLimits,
    Session,
    Status,
    default_tag,
)

T = TypeVar("T")
HOME = "/home/user"
DATA = "/mnt/data"
DEFAULT_TIMEOUT_S = 300.0
"""E2B's default for one `run_code`."""
UNBOUNDED_S = 24 * 3600.0
"""`timeout=0`: no deadline (a day)."""
KILLED = "the sandbox was killed while the request was in progress"
LANGUAGES = {"js": "javascript", "ts": "typescript", "sh": "bash"}


def run_features() -> frozenset[str]:
    """Which of `language`, `env` and `cwd` Cellmate's `Session.run` takes."""
    named = inspect.signature(Session.run).parameters
    return frozenset(name for name in ("language", "env", "cwd") if name in named)


FEATURES = run_features()


def language_of(language: str | None) -> str:
    name = (language or "python").lower()
    return LANGUAGES.get(name, name)


def data_path(path: str) -> str | None:
    """E2B's path as a path in /mnt/data ('' for the folder itself); None outside it."""
    for root in (HOME, DATA):
        if path == root:
            return ""
        if path.startswith(root + "/"):
            return path[len(root) + 1 :].strip("/")
    if path.startswith("/"):
        return None
    return path.strip("/")


def _must_be_data(path: str) -> str:
    inside = data_path(path)
    if inside is None:
        raise InvalidArgumentException(f"{path} is outside {HOME} (Cellmate's {DATA})")
    return inside


# ---------------------------------------------------------------- the executor's loop


class Backend:
    """The process's executor, on an event loop in a daemon thread."""

    _shared: Backend | None = None
    _guard = threading.Lock()

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self._executor: Executor | None = None
        self._opening: asyncio.Lock | None = None
        # A fallback: at exit the executor may no longer sweep what is left; pytest's run
        # closes it earlier (bench/e2b/plugin.py), a script may call `close_shared()`.
        atexit.register(self.close)

    @classmethod
    def shared(cls) -> Backend:
        with cls._guard:
            if cls._shared is None:
                cls._shared = Backend()
            return cls._shared

    def submit(self, work: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(work, self.loop)

    def call(self, work: Coroutine[Any, Any, T]) -> T:
        return self.submit(work).result()

    async def acall(self, work: Coroutine[Any, Any, T]) -> T:
        return await asyncio.wrap_future(self.submit(work))

    async def executor(self) -> Executor:
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._executor is None:
                executor = Executor(default_tag(), **executor_settings())
                self._executor = await executor.__aenter__()
            return self._executor

    async def session(self, key: str) -> Session:
        return (await self.executor()).session(key)

    @classmethod
    def close_shared(cls) -> None:
        if cls._shared is not None:
            cls._shared.close()

    def close(self) -> None:
        """End every sandbox of the process (its executor's `__aexit__`), then the loop."""

        async def shut() -> None:
            if self._executor is not None:
                await self._executor.__aexit__(None, None, None)
                self._executor = None

        if self.loop.is_running():
            # What is left goes at the next run with the same instance label.
            with contextlib.suppress(Exception):
                self.submit(shut()).result(timeout=120)
            self.loop.call_soon_threadsafe(self.loop.stop)


CHECKOUT = (
    "e2b-" + hashlib.sha256(str(Path(__file__).resolve().parents[2]).encode()).hexdigest()[:6]
)
"""The default instance label: runs from two checkouts on one engine never sweep each
other's sandboxes."""


def executor_settings() -> dict[str, Any]:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    runtime = os.environ.get("CELLMATE_E2B_RUNTIME", "runc")
    return {
        "limits": SandboxLimits(runtime=runtime, timeout_s=DEFAULT_TIMEOUT_S),  # type: ignore[arg-type]
        "pool": PoolSettings(
            size=int(os.environ.get("CELLMATE_E2B_POOL", "1")),
            max_live=int(os.environ.get("CELLMATE_E2B_MAX_LIVE", "4")),
            template=False,
        ),
        "instance": f"{os.environ.get('CELLMATE_E2B_INSTANCE', CHECKOUT)}-{worker}",
    }


# ---------------------------------------------------------------- one sandbox

Sink = Callable[[str, Any], None]
"""Where a run's output goes as it happens: ("stdout" | "stderr", OutputMessage),
("result", Result), ("error", ExecutionError)."""


@dataclass
class CommandResult:
    stdout: str
    stderr: str
    exit_code: int
    error: str | None = None


@dataclass
class EntryInfo:
    name: str
    type: str
    path: str
    size: int = 0
    modified_time: float = 0.0
    mode: int | None = None
    permissions: str | None = None
    owner: str | None = None
    group: str | None = None
    symlink_target: str | None = None


@dataclass
class WriteInfo:
    name: str
    type: str
    path: str


def entry_of(info: FileInfo) -> EntryInfo:
    """A Cellmate file entry as E2B's, with the fields Cellmate has (mode, owner and link
    target once its listings carry them)."""
    return EntryInfo(
        name=info.path.rsplit("/", 1)[-1],
        type="dir" if info.type == "dir" else "file",
        path=f"{DATA}/{info.path}",
        size=info.size,
        modified_time=info.modified,
        mode=getattr(info, "mode", None),
        permissions=getattr(info, "permissions", None),
        owner=getattr(info, "owner", None),
        group=getattr(info, "group", None),
        symlink_target=getattr(info, "symlink_target", None),
    )


class Core:
    """A sandbox's state, used on the backend's loop: its key, contexts and variables."""

    _known: ClassVar[dict[str, Core]] = {}

    def __init__(self, backend: Backend, sandbox_id: str) -> None:
        self.backend = backend
        self.sandbox_id = sandbox_id
        self.envs: dict[str, str] = {}
        self.contexts: dict[str, Context] = {}
        self.killed = False
        self.running = 0

    @classmethod
    def named(cls, sandbox_id: str | None) -> Core:
        """The process's sandbox of that id (`connect`), or a new one."""
        name = sandbox_id or f"cellmate-{uuid.uuid4().hex[:16]}"
        if name not in cls._known:
            cls._known[name] = Core(Backend.shared(), name)
        return cls._known[name]

    def key(self, context: Context | None = None) -> str:
        if context is None or context.id not in self.contexts:
            return f"e2b:{self.sandbox_id}"
        return f"e2b:{self.sandbox_id}:{context.id}"

    async def session(self, context: Context | None = None) -> Session:
        if self.killed:
            raise NotFoundException(f"sandbox {self.sandbox_id} was killed")
        return await self.backend.session(self.key(context))

    async def start(self, envs: Mapping[str, str] | None) -> None:
        if not envs:
            return
        if "env" in FEATURES:
            self.envs = dict(envs)
            return
        try:  # without per-run variables: the kernel's, for names the operator allowed
            await (await self.session()).set_env(dict(envs))
        except InvalidInput as error:
            raise InvalidArgumentException(str(error)) from error

    def default_contexts(self) -> list[Context]:
        languages = ["python"] + (["javascript"] if "language" in FEATURES else [])
        return [Context(f"default-{name}", name, HOME) for name in languages]

    async def run(
        self,
        code: str,
        sink: Sink,
        language: str | None = None,
        context: Context | None = None,
        envs: Mapping[str, str] | None = None,
        limit_s: float | None = None,
    ) -> Execution:
        if context is not None and language is not None:
            raise InvalidArgumentException("pass a context or a language, not both")
        name = language_of(context.language if context is not None else language)
        options: dict[str, Any] = {}
        if name != "python":
            if "language" not in FEATURES:
                raise InvalidArgumentException(f"Cellmate runs Python only here, not {name}")
            options["language"] = name
        variables = {**self.envs, **(envs or {})}
        if variables:
            if "env" not in FEATURES:
                raise InvalidArgumentException("Cellmate has no variables for one run (env=)")
            options["env"] = variables
        folder = _must_be_data(context.cwd) if context is not None else ""
        if folder:
            if "cwd" not in FEATURES:
                raise InvalidArgumentException(f"Cellmate runs in {DATA} only (cwd=)")
            options["cwd"] = folder
        if limit_s is not None:
            options["timeout_s"] = float(limit_s) if limit_s > 0 else UNBOUNDED_S
        session = await self.session(context)
        stdout: list[str] = []
        stderr: list[str] = []
        told = False

        def on_output(event: OutputEvent) -> None:
            nonlocal told
            if event.kind in ("stdout", "stderr") and event.text:
                (stdout if event.kind == "stdout" else stderr).append(event.text)
                sink(event.kind, OutputMessage(event.text, error=event.kind == "stderr"))
            elif event.kind == "result" and event.result is not None:
                sink("result", Result(event.result.data, event.result.is_main_result))
            elif event.kind == "error" and event.error is not None:
                told = True
                sink("error", error_of(event.error))

        self.running += 1
        try:
            result = await session.run(code, on_output=on_output, **options)
        finally:
            self.running -= 1
        execution = execution_of(result, stdout, stderr, self.killed)
        if execution.error is not None and not told:
            sink("error", execution.error)
        return execution

    async def kill(self) -> bool:
        if self.killed:
            return False
        self.killed = True
        executor = await self.backend.executor()
        keys = [self.key()] + [self.key(context) for context in self.contexts.values()]
        for key in keys:
            session = executor.session(key)
            session.stop()
            await session.close()
        return True

    async def create_context(self, cwd: str | None, language: str | None) -> Context:
        if self.killed:
            raise NotFoundException(f"sandbox {self.sandbox_id} was killed")
        context = Context(uuid.uuid4().hex, language_of(language), cwd or HOME)
        self.contexts[context.id] = context
        return context

    def list_contexts(self) -> list[Context]:
        return self.default_contexts() + list(self.contexts.values())

    def context_of(self, context: Context | str) -> Context:
        name = context if isinstance(context, str) else context.id
        found = self.contexts.get(name)
        if found is None:
            if any(c.id == name for c in self.default_contexts()):
                return Context(name, "python", HOME)
            raise NotFoundException(f"no context {name}")
        return found

    async def restart_context(self, context: Context | str) -> None:
        """The context's kernel starts afresh (its session ends; the next run starts one)."""
        await (await self.session(self.context_of(context))).close()

    async def remove_context(self, context: Context | str) -> None:
        found = self.context_of(context)
        await (await self.session(found)).close()
        self.contexts.pop(found.id, None)

    # files

    async def read(self, path: str) -> list[bytes]:
        """The file's bytes, in the chunks Cellmate streams them in where it can."""
        session = await self.session()
        inside = _must_be_data(path)
        stream = getattr(session, "read_file_stream", None)
        if stream is not None:
            try:
                return [chunk async for chunk in stream(inside)]
            except InvalidInput as error:
                raise NotFoundException(str(error)) from error
        content = await session.get_file(inside)
        if content is None:
            raise NotFoundException(f"no file {path}")
        return [content]

    async def write(self, path: str, content: bytes) -> WriteInfo:
        inside = _must_be_data(path)
        session = await self.session()
        stream = getattr(session, "write_file_stream", None)
        try:
            if stream is not None:
                step = 1 << 20
                await stream(
                    inside, [content[at : at + step] for at in range(0, len(content), step)]
                )
            else:
                await session.put_files({inside: content})
        except InvalidInput as error:
            raise InvalidArgumentException(str(error)) from error
        return WriteInfo(inside.rsplit("/", 1)[-1], "file", f"{DATA}/{inside}")

    async def listing(self, path: str, depth: int) -> list[EntryInfo]:
        inside = _must_be_data(path)
        session = await self.session()
        listed: Any = session.files  # `depth` where Cellmate's listings have it
        if "depth" in inspect.signature(listed).parameters:
            return [entry_of(info) for info in await listed(inside, depth=max(depth, 1))]
        found = await session.files(inside, recursive=depth > 1)
        base = len(inside.split("/")) if inside else 0
        return [
            entry_of(info) for info in found if len(info.path.split("/")) - base <= max(depth, 1)
        ]

    async def info(self, path: str) -> EntryInfo | None:
        inside = _must_be_data(path)
        if not inside:
            return EntryInfo("data", "dir", DATA)
        found = await (await self.session()).info(inside)
        return None if found is None else entry_of(found)

    async def make_dir(self, path: str) -> bool:
        if await self.info(path) is not None:
            return False
        await (await self.session()).make_dir(_must_be_data(path))
        return True

    async def remove(self, path: str) -> None:
        await (await self.session()).remove(_must_be_data(path))

    async def rename(self, old: str, new: str) -> EntryInfo:
        await (await self.session()).rename(_must_be_data(old), _must_be_data(new))
        found = await self.info(new)
        if found is None:
            raise NotFoundException(f"no file {new}")
        return found

    async def command(
        self, command: str, envs: Mapping[str, str] | None, cwd: str | None, limit_s: float
    ) -> CommandResult:
        """A shell command, run by the kernel's Python (Cellmate has no process API)."""
        folder = _must_be_data(cwd or HOME)
        code = COMMAND.format(
            command=json.dumps(command),
            envs=json.dumps(dict(envs or {})),
            cwd=json.dumps(f"{DATA}/{folder}".rstrip("/")),
            timeout=float(limit_s) if limit_s else None,
        )
        execution = await self.run(code, lambda kind, item: None, limit_s=(limit_s or 0) + 30)
        if execution.error is not None:
            raise SandboxException(f"{execution.error.name}: {execution.error.value}")
        last = "".join(execution.logs.stdout).strip().rsplit("\n", 1)[-1]
        outcome = json.loads(last)
        ran = CommandResult(outcome["stdout"], outcome["stderr"], outcome["exit_code"])
        if ran.exit_code != 0:
            raise CommandExitException(ran.stdout, ran.stderr, ran.exit_code, None)
        return ran


COMMAND = """\
def _e2b_command():
    import json, os, subprocess
    env = {{**os.environ, **json.loads({envs!r})}}
    try:
        done = subprocess.run(json.loads({command!r}), shell=True, capture_output=True,
                              text=True, cwd=json.loads({cwd!r}), env=env, timeout={timeout})
        out = {{"stdout": done.stdout, "stderr": done.stderr, "exit_code": done.returncode}}
    except subprocess.TimeoutExpired as error:
        out = {{"stdout": str(error.stdout or ""), "stderr": "timed out", "exit_code": -1}}
    print(json.dumps(out))
_e2b_command()
del _e2b_command
"""


def error_of(error: Any) -> ExecutionError:
    return ExecutionError(error.name, error.value, "\n".join(error.traceback))


def execution_of(
    result: ExecutionResult, stdout: list[str], stderr: list[str], killed: bool
) -> Execution:
    """E2B's execution from Cellmate's result; a run the sandbox's kill ended, or the time
    limit, raises `TimeoutException` as E2B's client does."""
    if killed and result.status in (Status.KILLED, Status.TIMEOUT):
        raise TimeoutException(KILLED)
    if result.status is Status.TIMEOUT:
        raise TimeoutException(result.message or "the execution timed out")
    error = None if result.error is None else error_of(result.error)
    if error is None and result.status in (Status.KILLED, Status.MEMORY):
        error = ExecutionError("KernelDied", result.message or result.status.value, "")
    if not stdout and result.stdout:
        stdout = [result.stdout]
    if not stderr and result.stderr:
        stderr = [result.stderr]
    return Execution(
        results=[Result(item.data, item.is_main_result) for item in result.results],
        logs=Logs(stdout, stderr),
        error=error,
        execution_count=result.execution_count,
    )


# ---------------------------------------------------------------- the front ends

Handler = Callable[[Any], Any]


def _handlers(
    on_stdout: Handler | None,
    on_stderr: Handler | None,
    on_result: Handler | None,
    on_error: Handler | None,
) -> dict[str, Handler]:
    given = {"stdout": on_stdout, "stderr": on_stderr, "result": on_result, "error": on_error}
    return {kind: handler for kind, handler in given.items() if handler is not None}


def _as_bytes(data: str | bytes | IO[Any]) -> bytes:
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, bytes | bytearray):
        return bytes(data)
    content = data.read()
    return content.encode("utf-8") if isinstance(content, str) else bytes(content)


def decoded(chunks: list[bytes], format: str) -> Any:
    if format == "stream":
        return iter(chunks)
    content = b"".join(chunks)
    if format == "bytes":
        return bytearray(content)
    return content.decode("utf-8")


async def _chunks(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


DONE = object()


class Filesystem:
    def __init__(self, core: Core) -> None:
        self._core = core

    def _call(self, work: Coroutine[Any, Any, T]) -> T:
        return self._core.backend.call(work)

    def read(self, path: str, format: str = "text", **options: Any) -> Any:
        return decoded(self._call(self._core.read(path)), format)

    def write(self, path: str, data: str | bytes | IO[Any], **options: Any) -> WriteInfo:
        return self._call(self._core.write(path, _as_bytes(data)))

    def list(self, path: str, depth: int | None = 1, **options: Any) -> list[EntryInfo]:
        return self._call(self._core.listing(path, depth or 1))

    def exists(self, path: str, **options: Any) -> bool:
        return self._call(self._core.info(path)) is not None

    def get_info(self, path: str, **options: Any) -> EntryInfo:
        found = self._call(self._core.info(path))
        if found is None:
            raise NotFoundException(f"no file {path}")
        return found

    def make_dir(self, path: str, **options: Any) -> bool:
        return self._call(self._core.make_dir(path))

    def remove(self, path: str, **options: Any) -> None:
        self._call(self._core.remove(path))

    def rename(self, old_path: str, new_path: str, **options: Any) -> EntryInfo:
        return self._call(self._core.rename(old_path, new_path))


class Commands:
    def __init__(self, core: Core) -> None:
        self._core = core

    def run(
        self,
        cmd: str,
        envs: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float = 60,
        **options: Any,
    ) -> CommandResult:
        return self._core.backend.call(self._core.command(cmd, envs, cwd, timeout))


class Sandbox:
    """E2B's synchronous sandbox; its calls wait on the executor's loop."""

    def __init__(self, sandbox_id: str | None = None, **options: Any) -> None:
        self._core = Core.named(sandbox_id)
        self.files = Filesystem(self._core)
        self.commands = Commands(self._core)

    @property
    def sandbox_id(self) -> str:
        return self._core.sandbox_id

    @classmethod
    def create(
        cls, template: str | None = None, envs: Mapping[str, str] | None = None, **options: Any
    ) -> Sandbox:
        sandbox = cls()
        sandbox._core.backend.call(sandbox._core.start(envs))
        return sandbox

    @classmethod
    def connect(cls, sandbox_id: str, **options: Any) -> Sandbox:
        return cls(sandbox_id)

    def is_running(self, **options: Any) -> bool:
        return not self._core.killed

    def kill(self, **options: Any) -> bool:
        return self._core.backend.call(self._core.kill())

    def run_code(
        self,
        code: str,
        language: str | None = None,
        context: Context | None = None,
        on_stdout: Handler | None = None,
        on_stderr: Handler | None = None,
        on_result: Handler | None = None,
        on_error: Handler | None = None,
        envs: Mapping[str, str] | None = None,
        timeout: float | None = None,
        request_timeout: float | None = None,
    ) -> Execution:
        handlers = _handlers(on_stdout, on_stderr, on_result, on_error)
        heard: queue.Queue[tuple[str, Any]] = queue.Queue()

        async def work() -> Execution:
            try:
                return await self._core.run(
                    code, lambda kind, item: heard.put((kind, item)), language, context, envs,
                    timeout,
                )  # fmt: skip
            finally:
                heard.put(("", DONE))

        running = self._core.backend.submit(work())
        while (heard_now := heard.get())[1] is not DONE:
            kind, item = heard_now
            if kind in handlers:
                handlers[kind](item)
        return running.result()

    def create_code_context(
        self, cwd: str | None = None, language: str | None = None, **options: Any
    ) -> Context:
        return self._core.backend.call(self._core.create_context(cwd, language))

    def list_code_contexts(self) -> list[Context]:
        return self._core.list_contexts()

    def restart_code_context(self, context: Context | str) -> None:
        self._core.backend.call(self._core.restart_context(context))

    def remove_code_context(self, context: Context | str) -> None:
        self._core.backend.call(self._core.remove_context(context))


class AsyncFilesystem:
    def __init__(self, core: Core) -> None:
        self._core = core

    async def _call(self, work: Coroutine[Any, Any, T]) -> T:
        return await self._core.backend.acall(work)

    async def read(self, path: str, format: str = "text", **options: Any) -> Any:
        content = decoded(await self._call(self._core.read(path)), format)
        return _chunks(content) if format == "stream" else content

    async def write(self, path: str, data: str | bytes | IO[Any], **options: Any) -> WriteInfo:
        return await self._call(self._core.write(path, _as_bytes(data)))

    async def list(self, path: str, depth: int | None = 1, **options: Any) -> list[EntryInfo]:
        return await self._call(self._core.listing(path, depth or 1))

    async def exists(self, path: str, **options: Any) -> bool:
        return await self._call(self._core.info(path)) is not None

    async def get_info(self, path: str, **options: Any) -> EntryInfo:
        found = await self._call(self._core.info(path))
        if found is None:
            raise NotFoundException(f"no file {path}")
        return found

    async def make_dir(self, path: str, **options: Any) -> bool:
        return await self._call(self._core.make_dir(path))

    async def remove(self, path: str, **options: Any) -> None:
        await self._call(self._core.remove(path))

    async def rename(self, old_path: str, new_path: str, **options: Any) -> EntryInfo:
        return await self._call(self._core.rename(old_path, new_path))


class AsyncCommands:
    def __init__(self, core: Core) -> None:
        self._core = core

    async def run(
        self,
        cmd: str,
        envs: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float = 60,  # noqa: ASYNC109 (E2B's signature)
        **options: Any,
    ) -> CommandResult:
        return await self._core.backend.acall(self._core.command(cmd, envs, cwd, timeout))


class AsyncSandbox:
    """E2B's asynchronous sandbox; callbacks run on the caller's loop and may be coroutines."""

    def __init__(self, sandbox_id: str | None = None, **options: Any) -> None:
        self._core = Core.named(sandbox_id)
        self.files = AsyncFilesystem(self._core)
        self.commands = AsyncCommands(self._core)

    @property
    def sandbox_id(self) -> str:
        return self._core.sandbox_id

    @classmethod
    async def create(
        cls, template: str | None = None, envs: Mapping[str, str] | None = None, **options: Any
    ) -> AsyncSandbox:
        sandbox = cls()
        await sandbox._core.backend.acall(sandbox._core.start(envs))
        return sandbox

    @classmethod
    async def connect(cls, sandbox_id: str, **options: Any) -> AsyncSandbox:
        return cls(sandbox_id)

    async def is_running(self, **options: Any) -> bool:
        return not self._core.killed

    async def kill(self, **options: Any) -> bool:
        return await self._core.backend.acall(self._core.kill())

    async def run_code(
        self,
        code: str,
        language: str | None = None,
        context: Context | None = None,
        on_stdout: Handler | None = None,
        on_stderr: Handler | None = None,
        on_result: Handler | None = None,
        on_error: Handler | None = None,
        envs: Mapping[str, str] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 (E2B's signature)
        request_timeout: float | None = None,
    ) -> Execution:
        handlers = _handlers(on_stdout, on_stderr, on_result, on_error)
        loop = asyncio.get_running_loop()
        heard: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

        def hear(kind: str, item: Any) -> None:
            loop.call_soon_threadsafe(heard.put_nowait, (kind, item))

        async def work() -> Execution:
            try:
                return await self._core.run(code, hear, language, context, envs, timeout)
            finally:
                hear("", DONE)

        running = asyncio.wrap_future(self._core.backend.submit(work()))
        try:
            while (heard_now := await heard.get())[1] is not DONE:
                kind, item = heard_now
                if kind in handlers:
                    answer = handlers[kind](item)
                    if inspect.isawaitable(answer):
                        await answer
        except BaseException:
            running.cancel()
            raise
        return await running

    async def create_code_context(
        self, cwd: str | None = None, language: str | None = None, **options: Any
    ) -> Context:
        return await self._core.backend.acall(self._core.create_context(cwd, language))

    async def list_code_contexts(self) -> list[Context]:
        return self._core.list_contexts()

    async def restart_code_context(self, context: Context | str) -> None:
        await self._core.backend.acall(self._core.restart_context(context))

    async def remove_code_context(self, context: Context | str) -> None:
        await self._core.backend.acall(self._core.remove_context(context))
