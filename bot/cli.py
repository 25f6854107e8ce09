"""The `cellmate` command: the composition root, where settings become services."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import sys
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from pathlib import Path

from bot.agent import Agent, AgentLimits
from bot.demo import DEMO_CODE
from bot.exec_output import print_result, save_outputs
from bot.history import History
from bot.http import create_app, start_server
from bot.llm import build_client
from bot.platforms.console import Console, is_terminal, run_interactive, run_piped
from bot.settings import Settings, SettingsError, load_settings
from bot.storage_setup import build_storage
from executor import ExecutionResult, Executor, ExecutorError, InvalidInput, SandboxLimits
from executor.docker_backend import connect
from executor.image import build_image
from storage.artifacts import ArtifactLimits
from storage.base import Storage
from storage.errors import StorageError, StorageUnavailable
from storage.intake import IntakeLimits
from storage.local import LocalStorage
from storage.retention import parse_age, prune, prune_periodically


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        settings = load_settings()
        code: int = args.handler(args, settings)
    except SettingsError as exc:
        print(f"cellmate: bad setting: {exc}", file=sys.stderr)
        return 2
    except InvalidInput as exc:
        print(f"cellmate: {exc}", file=sys.stderr)
        return 2
    except (ExecutorError, StorageError) as exc:
        print(f"cellmate: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return code


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cellmate", description="A code interpreter for team chat."
    )
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    run = commands.add_parser(
        "exec", help="run Python code in a fresh sandbox and show its outputs"
    )
    run.add_argument(
        "code", metavar="CODE_FILE", help="a Python file, or - to read the code from stdin"
    )
    run.add_argument(
        "--json", action="store_true", help="print the whole result as one JSON object"
    )
    run.add_argument(
        "--out", type=Path, metavar="DIR", help="save images and output files into DIR"
    )
    run.add_argument("--timeout", type=float, metavar="S", help="wall-clock limit in seconds")
    run.add_argument(
        "--runtime", choices=["runc", "runsc"], help="container runtime (default: settings)"
    )
    run.add_argument(
        "--file",
        action="append",
        default=[],
        type=Path,
        metavar="PATH",
        help="put this file into /mnt/data first (repeatable)",
    )
    run.set_defaults(handler=_exec)

    chat = commands.add_parser(
        "chat", help="chat in the terminal (reads a pipe when not a terminal)"
    )
    chat.set_defaults(handler=_chat)

    demo = commands.add_parser("demo", help="run a short example with a table and a chart")
    demo.add_argument("--out", type=Path, default=Path("out/demo"), metavar="DIR")
    demo.set_defaults(handler=_demo)

    store = commands.add_parser("storage", help="artifact storage: check it, prune old artifacts")
    store_commands = store.add_subparsers(required=True, metavar="ACTION")
    prune_parser = store_commands.add_parser("prune", help="remove artifacts older than an age")
    prune_parser.add_argument(
        "--older-than", required=True, metavar="AGE", help="e.g. 30d, 12h, 1d12h"
    )
    prune_parser.set_defaults(handler=_storage_prune)
    check_parser = store_commands.add_parser("check", help="check that artifacts can be stored")
    check_parser.set_defaults(handler=_storage_check)

    build = commands.add_parser("build-image", help="build the sandbox image if its inputs changed")
    build.add_argument(
        "--force", action="store_true", help="build even if an up-to-date image exists"
    )
    build.set_defaults(handler=_build_image)
    return parser


def _exec(args: argparse.Namespace, settings: Settings) -> int:
    source = sys.stdin.read() if args.code == "-" else _read_text(Path(args.code))
    files = {path.name: _read_bytes(path) for path in args.file}
    limits = settings.sandbox
    if args.timeout is not None:
        limits = dataclasses.replace(limits, timeout_s=args.timeout)
    if args.runtime is not None:
        limits = dataclasses.replace(limits, runtime=args.runtime)
    result = asyncio.run(_run_once(settings, limits, source, files))
    saved = save_outputs(result, args.out) if args.out else None
    if args.json:
        payload = result.to_json()
        if saved:
            payload["saved"] = {kind: [str(p) for p in paths] for kind, paths in saved.items()}
        json.dump(payload, sys.stdout)
        sys.stdout.write("\n")
    else:
        print_result(result, sys.stdout, saved)
    return 0


def _chat(args: argparse.Namespace, settings: Settings) -> int:
    return asyncio.run(_chat_session(settings))


async def _chat_session(settings: Settings) -> int:
    storage = build_storage(settings)
    try:
        await storage.check()
    except StorageError:
        await storage.close()
        raise
    history = History(settings.data_dir / "history.sqlite3")
    client = build_client(settings.model)
    # One sandbox kept ready is plenty for one person at a terminal.
    pool = dataclasses.replace(settings.pool, size=min(settings.pool.size, 1))
    try:
        async with Executor(
            settings.image, limits=settings.sandbox, instance=settings.instance, pool=pool
        ) as executor:
            agent = Agent(
                executor,
                storage,
                history,
                client=client,
                model=settings.model.model,
                limits=AgentLimits(
                    max_steps=settings.model.max_steps,
                    budget_s=settings.model.turn_budget_s,
                    vision=settings.model.vision,
                ),
                artifact_limits=ArtifactLimits(
                    max_bytes=int(settings.storage.artifact_max_mb * 1e6),
                    max_count=settings.storage.artifact_max_count,
                    link_expiry=timedelta(days=settings.storage.link_expiry_days),
                ),
                intake_limits=IntakeLimits(
                    max_bytes=int(settings.storage.attachment_max_mb * 1e6),
                    max_count=settings.storage.attachment_max_count,
                ),
            )
            console = Console(agent, sys.stdout, settings.data_dir / "exports")
            async with _background(settings, storage):
                if is_terminal():
                    await run_interactive(console, _banner(settings))
                else:
                    await run_piped(console, sys.stdin)
    finally:
        await storage.close()
        history.close()
        if client is not None:
            await client.close()
    return 0


@contextlib.asynccontextmanager
async def _background(settings: Settings, storage: Storage) -> AsyncIterator[None]:
    """What runs beside the chat: the HTTP server behind local links, and pruning."""
    runner = None
    if isinstance(storage, LocalStorage) and storage.base_url:
        address = f"{settings.http_host}:{settings.http_port}"
        try:
            runner = await start_server(create_app(storage), settings.http_host, settings.http_port)
        except OSError as exc:
            raise StorageUnavailable(
                f"cannot serve artifact links on {address}: {exc.strerror or exc}; "
                "set CELLMATE_HTTP_PORT (or CELLMATE_HTTP_HOST) to a free address"
            ) from exc
    pruning = None
    if settings.storage.retention_days:
        pruning = asyncio.create_task(prune_periodically(storage, settings.storage.retention_days))
    try:
        yield
    finally:
        if pruning is not None:
            pruning.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pruning
        if runner is not None:
            await runner.cleanup()


def _banner(settings: Settings) -> str:
    model = settings.model
    if model.configured:
        where = model.azure_endpoint or model.base_url or "OpenAI"
        brain = f"model {model.model} at {where}"
    else:
        brain = "no model configured: code blocks and /run only (see .env.example)"
    sandbox = f"{settings.sandbox.runtime} sandbox"
    return f"Cellmate console: {brain}; {sandbox}; files in {_describe(settings)}."


def _demo(args: argparse.Namespace, settings: Settings) -> int:
    print(
        f"Running an example in a fresh {settings.sandbox.runtime} sandbox ...",
        flush=True,
    )
    result = asyncio.run(_run_once(settings, settings.sandbox, DEMO_CODE, {}))
    saved = save_outputs(result, args.out)
    print("─" * 60)
    print_result(result, sys.stdout, saved)
    for image in saved["images"]:
        print(f"Open the chart: file://{image}")
    return 0


async def _run_once(
    settings: Settings, limits: SandboxLimits, source: str, files: dict[str, bytes]
) -> ExecutionResult:
    # One run needs one sandbox: no pool kept warm for a single command.
    pool = dataclasses.replace(settings.pool, size=0)
    async with Executor(
        settings.image, limits=limits, instance=settings.instance, pool=pool
    ) as executor:
        return await executor.run_notebook([source], files=files)


def _build_image(args: argparse.Namespace, settings: Settings) -> int:
    client = connect(timeout=900)
    build_image(
        client, tag=settings.sandbox_image or None, mirror=settings.debian_mirror, force=args.force
    )
    return 0


def _storage_prune(args: argparse.Namespace, settings: Settings) -> int:
    try:
        age = parse_age(args.older_than)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from exc

    async def run() -> int:
        storage = build_storage(settings)
        try:
            await storage.check()
            return await prune(storage, age)
        finally:
            await storage.close()

    removed = asyncio.run(run())
    print(f"Removed {removed} artifact(s) older than {args.older_than} from {_describe(settings)}.")
    return 0


def _storage_check(args: argparse.Namespace, settings: Settings) -> int:
    async def run() -> int:
        storage = build_storage(settings)
        try:
            await storage.check()
            return len(await storage.list())
        finally:
            await storage.close()

    count = asyncio.run(run())
    print(f"Storage is usable: {_describe(settings)}, {count} artifact(s).")
    return 0


def _describe(settings: Settings) -> str:
    if settings.storage.backend == "azure" or (
        settings.storage.backend == "auto" and settings.azure.configured
    ):
        return f"Azure Blob container {settings.azure.container!r}"
    return f"local files in {settings.data_dir / 'files'}"


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"cannot read code file {path}: {exc}") from exc


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InvalidInput(f"cannot read input file {path}: {exc}") from exc


if __name__ == "__main__":
    sys.exit(main())
