"""docker-compose.yml validates, and keeps the Docker socket away from the bot (the stack
itself runs in tests/compose/test_stack.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
SOCKET = "/var/run/docker.sock"


def compose_command() -> list[str]:
    found = subprocess.run(
        ["bash", str(ROOT / "scripts" / "ensure-compose.sh")],
        capture_output=True,
        text=True,
        check=True,
    )
    return found.stdout.split()


def test_the_compose_file_validates_and_only_the_proxy_holds_the_socket(tmp_path: Path) -> None:
    project = tmp_path / "cellmate"
    project.mkdir()
    shutil.copy(ROOT / "docker-compose.yml", project / "docker-compose.yml")
    shutil.copy(ROOT / ".env.example", project / ".env")  # what the README says to do first
    result = subprocess.run(
        [
            *compose_command(),
            "--project-directory",
            str(project),
            "-f",
            str(project / "docker-compose.yml"),
            "--profile",
            "setup",
            "--profile",
            "dev",
            "config",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load(result.stdout)
    services = config["services"]
    assert set(services) == {"bot", "docker-proxy", "sandbox-image", "azurite", "egress-proxy"}

    def mounts(name: str) -> list[str]:
        found = services[name].get("volumes", [])
        return [str(v.get("source") if isinstance(v, dict) else v) for v in found]

    assert not any(SOCKET in m for m in mounts("bot"))
    assert any(SOCKET in m for m in mounts("docker-proxy"))
    bot = services["bot"]
    assert bot["environment"]["DOCKER_HOST"] == "tcp://docker-proxy:2375"
    assert bot["read_only"] is True
    assert "ALL" in bot["cap_drop"]
    assert config["networks"]["docker-api"]["internal"] is True
    proxy = services["docker-proxy"]
    assert proxy["command"][:3] == [
        "docker-proxy",
        "--listen=0.0.0.0:2375",
        "--upstream=/var/run/docker.sock",
    ]
    assert proxy["command"][3] == "--sandbox-user=61000:61000"
    # Images come from the host's builds (cellmate build-image --bot / --azurite), not from
    # a registry or a Compose build.
    assert bot["image"] == proxy["image"] == "cellmate-bot:latest"
    assert "build" not in bot
    assert services["azurite"]["image"] == "cellmate-azurite:latest"
    assert str(services["azurite"]["ports"][0]).startswith("127.0.0.1:")
    assert (ROOT / "bot" / "Dockerfile").read_text().count("USER cellmate") == 1
    # The egress proxy (the allowlist profile): on the host's network to reach the sandbox
    # network's gateway, so everything else about it is locked down, and no socket.
    egress = services["egress-proxy"]
    assert egress["profiles"] == ["allowlist"]
    assert egress["network_mode"] == "host"
    assert not any(SOCKET in m for m in mounts("egress-proxy"))
    assert egress["read_only"] is True
    assert egress["cap_drop"] == ["ALL"]
    assert "no-new-privileges:true" in egress["security_opt"]
    assert "user" not in egress  # the image's own non-root user
    assert egress["entrypoint"] == ["/opt/egress/bin/python", "-m", "egressproxy"]
    # The bot's control port is published on the host's loopback only.
    assert any(str(port).startswith("127.0.0.1:") and "3129" in str(port) for port in bot["ports"])
