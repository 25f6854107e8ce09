"""The `cellmate` command: the composition root, where settings become services.

Longer than most modules: one parser and one small handler per subcommand.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from bot.logs import setup_logging
from bot.mcp.bridge import bridge, endpoint_url
from bot.mcp.service import mcp_service
from bot.ops.demo import DEMO_CODE
from bot.ops.doctor import diagnose, report
from bot.ops.exec_output import print_result, save_outputs
from bot.ops.front_ends import PLATFORMS, configured_platforms
from bot.ops.images import build_azurite_image, build_bot_image
from bot.ops.postgres_image import build_postgres_image
from bot.ops.serve import NoPlatform, serve
from bot.ops.services import background, services
from bot.ops.storage_setup import build_storage
from bot.platforms.console import Console, is_terminal, run_interactive, run_piped
from bot.settings import Settings, SettingsError, load_settings
from dockerproxy.cli import main as docker_proxy_main
from executor import ExecutionResult, Executor, ExecutorError, InvalidInput, SandboxLimits
from executor.docker_backend import connect
from executor.image import build_image
from executor.languages import parse_languages
from storage.errors import StorageError
from storage.retention import parse_age, prune


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["docker-proxy"]:
        # A process of its own trust role: it reads none of the bot's settings or secrets.
        return docker_proxy_main(arguments[1:])
    if arguments[:1] == ["egress-proxy"]:
        # Imported here: mitmproxy is installed where the proxy runs, not with the bot.
        from egressproxy.cli import main as egress_proxy_main

        return egress_proxy_main(arguments[1:])
    parser = _parser()
    args = parser.parse_args(arguments)
    try:
        settings = load_settings()
        serving = args.handler is _serve or (
            args.handler is _start and bool(configured_platforms(settings))
        )
        setup_logging(
            settings.log_format, settings.log_level if serving else "WARNING", settings.secrets
        )
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
        "--out",
        type=Path,
        metavar="DIR",
        help="save images and output files (under plain, unique names) into DIR",
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

    serve_parser = commands.add_parser(
        "serve", help="run the bot on every chat platform configured in .env"
    )
    serve_parser.set_defaults(handler=_serve)

    start = commands.add_parser(
        "start", help="serve when a chat platform is configured, else open the console chat"
    )
    start.set_defaults(handler=_start)

    doctor = commands.add_parser(
        "doctor", help="check the engine, image, storage, model and platform tokens"
    )
    doctor.set_defaults(handler=_doctor)

    mcp = commands.add_parser(
        "mcp",
        help="MCP over stdio for a coding agent: forwards to the running bot's MCP endpoint "
        "with the token in CELLMATE_MCP_TOKEN (from /mcp token)",
    )
    mcp.add_argument(
        "--url", metavar="URL", help="the bot's MCP endpoint (default: from CELLMATE_MCP_HOST/PORT)"
    )
    mcp.set_defaults(handler=_mcp)

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

    proxy = commands.add_parser(
        "docker-proxy",
        help="serve the Docker API to the bot, for sandboxes only (--help for its options)",
        add_help=False,
    )
    proxy.add_argument("proxy_args", nargs=argparse.REMAINDER)
    egress = commands.add_parser(
        "egress-proxy",
        help="the sandboxes' only way out in allowlist mode (--help for its options)",
        add_help=False,
    )
    egress.add_argument("proxy_args", nargs=argparse.REMAINDER)

    build = commands.add_parser("build-image", help="build the sandbox image if its inputs changed")
    build.add_argument(
        "--force", action="store_true", help="build even if an up-to-date image exists"
    )
    which = build.add_mutually_exclusive_group()
    which.add_argument(
        "--bot", action="store_true", help="build the bot's image (cellmate-bot) for Compose"
    )
    which.add_argument(
        "--azurite",
        action="store_true",
        help="build an Azurite image (cellmate-azurite) from the npm package, for Compose",
    )
    which.add_argument(
        "--postgres",
        action="store_true",
        help="build a PostgreSQL 15 image (cellmate-postgres) from Debian's packages",
    )
    build.add_argument(
        "--languages",
        metavar="LIST",
        help="languages beside Python in the sandbox image, a comma list of r,javascript,bash "
        "(default: CELLMATE_SANDBOX_LANGUAGES, else all; '' for Python only); the bot finds "
        "the image by the same setting",
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


def _serve(args: argparse.Namespace, settings: Settings) -> int:
    try:
        asyncio.run(serve(settings))
    except NoPlatform as exc:
        print(f"cellmate: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a platform refusing the bot is told plainly; the rest goes on
        for platform in PLATFORMS:
            if refusal := platform.refusal(exc):
                print(f"cellmate: {refusal}", file=sys.stderr)
                return 2
        raise
    return 0


def _doctor(args: argparse.Namespace, settings: Settings) -> int:
    return report(asyncio.run(diagnose(settings)), sys.stdout)


def _start(args: argparse.Namespace, settings: Settings) -> int:
    if configured_platforms(settings):
        return _serve(args, settings)
    return _chat(args, settings)


def _chat(args: argparse.Namespace, settings: Settings) -> int:
    return asyncio.run(_chat_session(settings))


async def _chat_session(settings: Settings) -> int:
    # One sandbox kept ready is plenty for one person at a terminal.
    pool = dataclasses.replace(settings.pool, size=min(settings.pool.size, 1))
    async with (
        services(settings, pool) as running,
        background(settings, running.storage),
        mcp_service(running.conversations, settings) as desk,
    ):
        console = Console(running.conversations, sys.stdout, settings.data_dir / "exports")
        if desk is not None:
            print(f"MCP endpoint for coding agents: {desk.url}", file=sys.stderr, flush=True)
        if is_terminal():
            await run_interactive(console, _banner(settings))
        else:
            await run_piped(console, sys.stdin)
    return 0


def _mcp(args: argparse.Namespace, settings: Settings) -> int:
    url = args.url or endpoint_url(settings.mcp_host, settings.mcp_port)
    return asyncio.run(bridge(url, os.environ.get("CELLMATE_MCP_TOKEN", "").strip()))


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
        settings.image,
        limits=limits,
        backend=settings.sandbox_backend(),
        instance=settings.sandbox_instance,
        pool=pool,
    ) as executor:
        return await executor.run_notebook([source], files=files)


def _build_image(args: argparse.Namespace, settings: Settings) -> int:
    try:
        languages = (
            settings.sandbox.image_languages
            if args.languages is None
            else parse_languages(args.languages)
        )
    except ValueError as exc:
        raise InvalidInput(str(exc)) from exc
    client = connect(timeout=900)
    if args.bot:
        build_bot_image(client, mirror=settings.debian_mirror, force=args.force)
        return 0
    if args.azurite:
        build_azurite_image(client, mirror=settings.debian_mirror, force=args.force)
        return 0
    if args.postgres:
        build_postgres_image(client, mirror=settings.debian_mirror, force=args.force)
        return 0
    build_image(
        client,
        tag=settings.sandbox_image or None,
        mirror=settings.debian_mirror,
        force=args.force,
        languages=languages,
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
