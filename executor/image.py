"""Building the sandbox image, with or without a container registry.

The tag is a hash of everything that goes into the image (Dockerfile, pinned requirements,
the runner and the protocol package it shares with the host, executor/wire/), so an image
is rebuilt exactly when its inputs change. The build context is environments/jupyter with
that package added at executor/wire/, sent to the engine as one tar stream. Wheels are
downloaded on the host into the build context; the base is python:3.11-slim-bookworm when
the engine has it or can pull it, and otherwise a Debian bookworm root made with debootstrap
and `docker import`.
"""

from __future__ import annotations

import contextlib
import hashlib
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

import docker
import docker.errors

from executor.errors import ImageBuildError

CONTEXT_DIR = Path(__file__).resolve().parent.parent / "environments" / "jupyter"
CONTEXT_FILES = ("Dockerfile", "requirements.txt", "cellmate_runner.py")
RUNNER_PACKAGE = "runner"
"""The runner's modules, in the context beside its entry point (every *.py in it)."""
PROTOCOL = Path(__file__).resolve().parent / "wire"
PROTOCOL_NAME = "executor/wire"
"""Where the protocol package goes in the build context (and, under /opt/cellmate, in the image)."""
IMAGE_REPOSITORY = "cellmate-sandbox"
OFFICIAL_BASE = "python:3.11-slim-bookworm"
DEBIAN_SUITE = "bookworm"
DEBOOTSTRAP_PACKAGES = ("python3", "python3-venv", "ca-certificates")

Say = Callable[[str], None]


def inputs(context: Path = CONTEXT_DIR) -> list[tuple[str, Path]]:
    """Every file that goes into the image from the host but the wheels (which the pinned
    requirements name), by its name in the build context."""
    named = [(name, context / name) for name in CONTEXT_FILES]
    package = sorted((context / RUNNER_PACKAGE).glob("*.py"))
    named += [(path.relative_to(context).as_posix(), path) for path in package]
    protocol = sorted(PROTOCOL.glob("*.py"))
    return named + [(f"{PROTOCOL_NAME}/{path.name}", path) for path in protocol]


def content_hash(context: Path = CONTEXT_DIR) -> str:
    digest = hashlib.sha256()
    for name, path in inputs(context):
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def default_tag(context: Path = CONTEXT_DIR) -> str:
    return f"{IMAGE_REPOSITORY}:{content_hash(context)}"


def image_exists(client: docker.DockerClient, tag: str) -> bool:
    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def build_image(
    client: docker.DockerClient,
    tag: str | None = None,
    context: Path = CONTEXT_DIR,
    mirror: str = "http://deb.debian.org/debian",
    force: bool = False,
    say: Say = print,
) -> str:
    """Build the sandbox image unless an image with the same content tag exists."""
    tag = tag or default_tag(context)
    if not force and image_exists(client, tag):
        say(f"Sandbox image {tag} is up to date.")
        return tag
    say(f"Building sandbox image {tag} ...")
    download_wheels(context, say)
    base = base_image(client, mirror, say)
    say(f"Building on {base} (this takes a minute or two) ...")
    with tempfile.TemporaryFile(prefix="cellmate-sandbox-context-") as archive:
        build_context(context, archive)
        archive.seek(0)
        docker_build(client, tag, base, fileobj=archive, say=say)
    client.images.get(tag).tag(IMAGE_REPOSITORY, "latest")
    say(f"Built {tag}.")
    remove_stale_images(client, keep=tag)
    return tag


def build_context(context: Path, out: IO[bytes]) -> None:
    """The sandbox image's build context as a tar: the inputs and the downloaded wheels,
    readable by everyone, owned by root."""

    def plain(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if "__pycache__" in info.name:
            return None
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        info.mode = 0o755 if info.isdir() else 0o644
        return info

    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, path in inputs(context):
            tar.add(path, arcname=name, filter=plain)
        tar.add(context / "wheels", arcname="wheels", filter=plain)


def docker_build(
    client: docker.DockerClient,
    tag: str,
    base: str,
    *,
    say: Say,
    path: str | None = None,
    dockerfile: str | None = None,
    fileobj: IO[bytes] | None = None,
) -> None:
    """Build `tag` on `base` from a folder or a tar stream, showing each step; any failure
    is an ImageBuildError with the engine's reason."""
    try:
        for chunk in client.api.build(
            path=path,
            dockerfile=dockerfile,
            fileobj=fileobj,
            custom_context=fileobj is not None,
            tag=tag,
            buildargs={"BASE_IMAGE": base},
            rm=True,
            forcerm=True,
            decode=True,
        ):
            if "error" in chunk:
                raise ImageBuildError(f"docker build failed: {chunk['error'].strip()}")
            line = str(chunk.get("stream", "")).strip()
            if line.startswith("Step "):
                say(f"  {line}")
    except docker.errors.APIError as exc:
        raise ImageBuildError(f"docker build failed: {exc}") from exc


def remove_stale_images(client: docker.DockerClient, keep: str) -> None:
    """Drop sandbox images of earlier inputs; one that a container still uses stays."""
    for image in client.images.list(name=IMAGE_REPOSITORY):
        tags = set(image.tags)
        if keep in tags or f"{IMAGE_REPOSITORY}:latest" in tags:
            continue
        for stale in tags:
            with contextlib.suppress(docker.errors.APIError):
                client.images.remove(stale, noprune=False)


def download_wheels(context: Path, say: Say) -> None:
    """Fetch the sandbox's pinned wheels for CPython 3.11 on manylinux into its build context."""
    say("Downloading the sandbox's Python wheels on the host ...")
    download_pinned_wheels(context / "requirements.txt", context / "wheels", "the sandbox's")


def download_pinned_wheels(requirements: Path, dest: Path, what: str) -> None:
    """Fetch exactly the wheels `requirements` pins, for CPython 3.11 on manylinux, into
    `dest`: containers reach no package index, so the host downloads for them."""
    dest.mkdir(parents=True, exist_ok=True)
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(
        platform.machine().lower(), platform.machine()
    )
    platforms = [f"manylinux_2_{minor}_{arch}" for minor in (36, 28, 17)] + [
        f"manylinux2014_{arch}"
    ]
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--disable-pip-version-check",
        "--only-binary=:all:",
        "--no-deps",
        "--python-version",
        "3.11",
        "--implementation",
        "cp",
        "--abi",
        "cp311",
        "--dest",
        str(dest),
        "-r",
        str(requirements),
    ]
    for name in platforms:
        command += ["--platform", name]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ImageBuildError(f"could not download {what} wheels:\n{result.stderr[-3000:]}")


def base_image(client: docker.DockerClient, mirror: str, say: Say) -> str:
    """python:3.11-slim-bookworm where the engine has it or can pull it, else a debootstrap
    root imported into the engine (made once, then found by its tag)."""
    return official_base(client, say) or debootstrap_base(client, mirror, say)


def official_base(client: docker.DockerClient, say: Say) -> str | None:
    if image_exists(client, OFFICIAL_BASE):
        return OFFICIAL_BASE
    try:
        repository, tag = OFFICIAL_BASE.split(":")
        client.images.pull(repository, tag=tag)
    except docker.errors.APIError as exc:
        say(
            f"Cannot pull {OFFICIAL_BASE} ({str(exc).splitlines()[0][:120]}); "
            "building a base with debootstrap."
        )
        return None
    return OFFICIAL_BASE


def debootstrap_base(client: docker.DockerClient, mirror: str, say: Say) -> str:
    recipe = f"{DEBIAN_SUITE} {' '.join(DEBOOTSTRAP_PACKAGES)} {platform.machine()}"
    tag = f"cellmate-base:{DEBIAN_SUITE}-{hashlib.sha256(recipe.encode()).hexdigest()[:8]}"
    if image_exists(client, tag):
        return tag
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None:
        raise ImageBuildError(
            f"{OFFICIAL_BASE} cannot be pulled and debootstrap is not installed; "
            "install it (apt-get install debootstrap) or make the base image available."
        )
    with tempfile.TemporaryDirectory(prefix="cellmate-rootfs-") as tmp:
        root = Path(tmp) / "root"
        say(f"Creating a Debian {DEBIAN_SUITE} root file system with debootstrap from {mirror} ...")
        result = subprocess.run(
            [
                debootstrap,
                "--variant=minbase",
                f"--include={','.join(DEBOOTSTRAP_PACKAGES)}",
                DEBIAN_SUITE,
                str(root),
                mirror,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise ImageBuildError(f"debootstrap failed:\n{(result.stdout + result.stderr)[-3000:]}")
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            shutil.rmtree(root / cache, ignore_errors=True)
        say(f"Importing it as {tag} ...")
        archive = Path(tmp) / "root.tar"
        with tarfile.open(archive, "w") as tar:
            tar.add(root, arcname=".")
        try:
            client.api.import_image_from_file(
                str(archive), repository=tag.split(":")[0], tag=tag.split(":")[1]
            )
        except docker.errors.APIError as exc:
            raise ImageBuildError(f"docker import failed: {exc}") from exc
    return tag
