"""The bot's container image, and an Azurite image for Compose, built without a registry.

Like the sandbox image (executor/image.py): the base is python:3.11-slim-bookworm where the
engine has it or can pull it, else the debootstrap base; the host downloads the wheels into
the build context (containers reach no package index); the tag is a hash of all that goes
in, so an image is rebuilt exactly when its inputs change. Earlier images stay (removing
one can wait for minutes on a busy engine; most layers are shared). The bot's wheels are
those of the dependency closure installed here, pinned, so the image runs what the tests
ran.

Azurite (Microsoft's Blob emulator) comes from npm, not from a registry image: the host's
node binary and the npm-installed package (`make azurite`) on the same base.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from importlib import metadata
from pathlib import Path

import docker
import docker.errors

from executor.errors import ImageBuildError
from executor.image import Say, base_image, docker_build, download_pinned_wheels, image_exists

ROOT = Path(__file__).resolve().parents[2]
BOT_REPOSITORY = "cellmate-bot"
AZURITE_REPOSITORY = "cellmate-azurite"
WHEELS = ROOT / "build" / "bot-wheels"
EGRESS_WHEELS = ROOT / "build" / "egress-wheels"
EGRESS_REQUIREMENTS = ROOT / "egressproxy" / "requirements.txt"
SDIST_MARK = "# sdist"
# What the bot's build context holds (.dockerignore lets in nothing else).
BOT_INPUTS = (
    ".dockerignore",
    "bot",
    "dockerproxy",
    "egressproxy",
    "executor",
    "storage",
    "environments/jupyter/Dockerfile",
    "environments/jupyter/requirements.txt",
    "environments/jupyter/cellmate_runner.py",
    "environments/jupyter/runner",
)
AZURITE_DOCKERFILE = ROOT / "deploy" / "azurite" / "Dockerfile"
NODE_MODULES = ROOT / ".tools" / "node_modules"


def runtime_requirements() -> str:
    """`name==version` lines for pyproject.toml's runtime dependencies and theirs, as
    installed in this environment (extras only where a requirement asks for them; no dev
    tools)."""
    from packaging.requirements import Requirement  # host-side only, at build time
    from packaging.utils import canonicalize_name

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins: dict[str, str] = {}
    done: set[tuple[str, str]] = set()
    todo: list[tuple[str, str]] = [(spec, "") for spec in declared]
    while todo:
        spec, extra = todo.pop()
        requirement = Requirement(spec)
        if requirement.marker and not requirement.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(requirement.name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError as exc:
            raise ImageBuildError(f"{name} is not installed here: run `make venv`") from exc
        pins[name] = dist.version
        for wanted in ("", *sorted(requirement.extras)):
            if (name, wanted) not in done:
                done.add((name, wanted))
                todo += [(child, wanted) for child in dist.requires or []]
    return "".join(f"{name}=={version}\n" for name, version in sorted(pins.items()))


def bot_tag(requirements: str, root: Path = ROOT) -> str:
    digest = hashlib.sha256(requirements.encode())
    for path in _input_files(root):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return f"{BOT_REPOSITORY}:{digest.hexdigest()[:12]}"


def _input_files(root: Path) -> list[Path]:
    found: list[Path] = []
    for name in BOT_INPUTS:
        path = root / name
        if path.is_file():
            found.append(path)
            continue
        found += [
            p
            for p in path.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
        ]
    return sorted(found)


def build_bot_image(
    client: docker.DockerClient, mirror: str, force: bool = False, say: Say = print
) -> str:
    """Build cellmate-bot:<hash> (also tagged latest) unless it exists."""
    requirements = runtime_requirements()
    tag = bot_tag(requirements)
    if not force and image_exists(client, tag):
        client.images.get(tag).tag(BOT_REPOSITORY, "latest")
        say(f"Bot image {tag} is up to date.")
        return tag
    say(f"Building bot image {tag} ...")
    if WHEELS.exists():
        shutil.rmtree(WHEELS)  # only the pinned wheels go into the context
    WHEELS.mkdir(parents=True)
    (WHEELS / "requirements.txt").write_text(requirements)
    say("Downloading the bot's Python wheels on the host ...")
    download_pinned_wheels(WHEELS / "requirements.txt", WHEELS, "the bot's")
    say("Downloading the egress proxy's Python wheels on the host ...")
    download_egress_wheels(EGRESS_WHEELS)
    base = base_image(client, mirror, say)
    say(f"Building on {base} ...")
    docker_build(client, tag, base, path=str(ROOT), dockerfile="bot/Dockerfile", say=say)
    client.images.get(tag).tag(BOT_REPOSITORY, "latest")
    say(f"Built {tag}.")
    return tag


def download_egress_wheels(dest: Path) -> None:
    """The wheels of egressproxy/requirements.txt into `dest` (with the pins, bare, as
    dest/requirements.txt); those marked `# sdist` are built on the host (pure Python)."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    lines = [line.strip() for line in EGRESS_REQUIREMENTS.read_text().splitlines()]
    pins = [line for line in lines if line and not line.startswith("#")]
    built = [pin.split("#")[0].strip() for pin in pins if SDIST_MARK in pin]
    binary = [pin for pin in pins if SDIST_MARK not in pin]
    (dest / "requirements.txt").write_text(
        "".join(pin.split("#")[0].strip() + "\n" for pin in pins)
    )
    (dest / "binary.txt").write_text("".join(pin + "\n" for pin in binary))
    download_pinned_wheels(dest / "binary.txt", dest, "the egress proxy's")
    (dest / "binary.txt").unlink()
    if built:
        command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check"]
        result = subprocess.run(
            [*command, "--no-deps", "-w", str(dest), *built],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise ImageBuildError(f"could not build {built}:\n{result.stderr[-3000:]}")


def build_azurite_image(
    client: docker.DockerClient, mirror: str, force: bool = False, say: Say = print
) -> str:
    """Build cellmate-azurite:<hash> (also tagged latest) from the host's node binary and
    the Azurite package `make azurite` installed."""
    node = shutil.which("node")
    package = NODE_MODULES / "azurite" / "package.json"
    if node is None or not package.exists():
        raise ImageBuildError(
            "the Azurite image needs node and the npm package: run `make azurite` "
            "(or set CELLMATE_AZURITE_IMAGE to an Azurite image your engine can pull)"
        )
    node_binary = Path(node).resolve()
    digest = hashlib.sha256(AZURITE_DOCKERFILE.read_bytes())
    digest.update(hashlib.sha256(node_binary.read_bytes()).digest() + package.read_bytes())
    tag = f"{AZURITE_REPOSITORY}:{digest.hexdigest()[:12]}"
    if not force and image_exists(client, tag):
        client.images.get(tag).tag(AZURITE_REPOSITORY, "latest")
        say(f"Azurite image {tag} is up to date.")
        return tag
    base = base_image(client, mirror, say)
    say(f"Building Azurite image {tag} on {base} ...")
    with tempfile.TemporaryFile(prefix="cellmate-azurite-") as context:
        with tarfile.open(fileobj=context, mode="w") as tar:
            tar.add(AZURITE_DOCKERFILE, arcname="Dockerfile")
            tar.add(node_binary, arcname="node")
            tar.add(NODE_MODULES, arcname="node_modules")
        context.seek(0)
        docker_build(client, tag, base, fileobj=context, say=say)
    client.images.get(tag).tag(AZURITE_REPOSITORY, "latest")
    say(f"Built {tag}.")
    return tag
