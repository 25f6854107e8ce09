"""A Compose project made the way the README says: a directory with docker-compose.yml and
a `.env` from .env.example, driven by the Compose command this machine has."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[2]


def compose_command() -> list[str]:
    found = subprocess.run(
        ["bash", str(ROOT / "scripts" / "ensure-compose.sh")],
        capture_output=True,
        text=True,
        check=True,
    )
    return found.stdout.split()


class Stack:
    def __init__(self, directory: Path, project: str) -> None:
        self.directory = directory
        self.project = project
        self.command = [*compose_command(), "--project-name", project]
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "docker-compose.yml").write_bytes((ROOT / "docker-compose.yml").read_bytes())
        self.write_env()  # cp .env.example .env, the README's first step

    def write_env(self, **settings: str) -> None:
        """.env.example with these settings changed (or added), as an operator edits it."""
        lines = (ROOT / ".env.example").read_text().splitlines()
        left = dict(settings)
        # A setting's own line (NAME=...), else its commented-out one (# NAME=...); a comment
        # that only mentions NAME=value in its prose stays.
        at: dict[str, int] = {}
        for number, line in enumerate(lines):
            name = line.split("=", 1)[0]
            if name in left and (name not in at or lines[at[name]].startswith("#")):
                at[name] = number
            elif name.startswith("# ") and name[2:] in left and name[2:] not in at:
                at[name[2:]] = number
        out = list(lines)
        for name, number in at.items():
            out[number] = f"{name}={left.pop(name)}"
        out += [f"{name}={value}" for name, value in left.items()]
        (self.directory / ".env").write_text("\n".join(out) + "\n")

    def run(self, *args: str, timeout: float = 180) -> str:
        result = subprocess.run(
            [*self.command, *args],
            cwd=self.directory,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if result.returncode != 0:
            raise AssertionError(
                f"`{' '.join(args)}` failed ({result.returncode}):\n{result.stderr[-4000:]}"
            )
        return result.stdout

    def container_id(self, service: str) -> str:
        found = self.run("ps", "-q", service).split()
        assert found, f"no {service} container"
        return found[0]

    def inspect(self, service: str) -> dict[str, Any]:
        return _inspect("container", self.container_id(service))

    def gateway(self) -> str:
        """The host's address on the project's default network."""
        network = _inspect("network", f"{self.project}_default")
        return str(network["IPAM"]["Config"][0]["Gateway"])

    def logs(self, profile: str = "dev") -> str:
        result = subprocess.run(
            [*self.command, "--profile", profile, "logs", "--no-color", "--tail=150"],
            cwd=self.directory,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return result.stdout + result.stderr

    def leftovers(self) -> list[str]:
        """Containers, volumes and networks of this project that still exist."""
        label = f"com.docker.compose.project={self.project}"
        found = []
        for kind in ("ps -a", "volume ls", "network ls"):
            listed = subprocess.run(
                ["docker", *kind.split(), "-q", "--filter", f"label={label}"],
                capture_output=True,
                text=True,
                check=True,
            )
            found += [f"{kind.split()[0]} {name}" for name in listed.stdout.split()]
        return found


def _inspect(kind: str, name: str) -> dict[str, Any]:
    result = subprocess.run(
        ["docker", kind, "inspect", name], capture_output=True, text=True, check=True
    )
    found: list[dict[str, Any]] = json.loads(result.stdout)
    return found[0]


async def healthy(url: str, timeout: float = 120) -> dict[str, Any]:  # noqa: ASYNC109
    """/healthz once it answers green (the bot starts, or restarts)."""
    deadline = time.monotonic() + timeout
    last: object = None
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                async with session.get(url) as response:
                    last = await response.json()
                    if response.status == 200 and last["status"] == "ok":  # type: ignore[index]
                        return last  # type: ignore[return-value]
            except (aiohttp.ClientError, json.JSONDecodeError) as exc:
                last = exc
            await asyncio.sleep(1)
    raise AssertionError(f"/healthz did not turn green: {last}")
