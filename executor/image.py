"""Building the sandbox image, with or without a container registry.

The tag is a hash of everything that goes into the image (Dockerfile, pinned requirements,
the runner and the protocol package it shares with the host, executor/wire/, and the
languages beside Python that executor.languages describes), so an image is rebuilt exactly
when its inputs change. The languages come from CELLMATE_SANDBOX_LANGUAGES (or `cellmate
build-image --languages`), read by the same function at build and at run time, so the bot
finds the image built for it; the image names them in its label org.cellmate.languages.
The build context is environments/jupyter with that package added at executor/wire/ and
the kernelspecs at kernels/, sent to the engine as one tar stream. Wheels are downloaded on
the host into the build context, and so are the languages' Debian packages (executor.apt)
and the JavaScript kernel's npm packages; the base is python:3.11-slim-bookworm when the
engine has it or can pull it, and otherwise a Debian bookworm root made with debootstrap
and `docker import`.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import docker
import docker.errors

from executor.apt import DEBIAN_SUITE, Apt, base_status
from executor.errors import ImageBuildError
from executor.languages import (
    LABEL,
    LANGUAGES,
    NPM_DIR,
    NPM_LOCK_SHA256,
    TSLAB_PATCH,
    TSLAB_PATCH_FILE,
    VARIABLE,
    configured_languages,
    deb_packages,
    digest_input,
    kernelspec_files,
    parse_languages,
)

CONTEXT_DIR = Path(__file__).resolve().parent.parent / "environments" / "jupyter"
CONTEXT_FILES = ("Dockerfile", "requirements.txt", "cellmate_runner.py")
RUNNER_PACKAGE = "runner"
"""The runner's modules, in the context beside its entry point (every *.py in it, and the
R code it loads into the R kernel, *.R, and the *.js its JavaScript kernels load)."""
PROTOCOL = Path(__file__).resolve().parent / "wire"
PROTOCOL_NAME = "executor/wire"
"""Where the protocol package goes in the build context (and, under /opt/cellmate, in the image)."""
IMAGE_REPOSITORY = "cellmate-sandbox"
OFFICIAL_BASE = "python:3.11-slim-bookworm"
DEBOOTSTRAP_PACKAGES = ("python3", "python3-venv", "ca-certificates")
NPM_TRIES = 3

Say = Callable[[str], None]


def inputs(context: Path = CONTEXT_DIR) -> list[tuple[str, Path]]:
    """Every file that goes into the image from the host but the downloads (the wheels,
    which the pinned requirements name; the .debs; node_modules, which the npm lock file
    pins), by its name in the build context. The languages' own inputs are in
    executor.languages."""
    named = [(name, context / name) for name in CONTEXT_FILES]
    folder = context / RUNNER_PACKAGE
    package = sorted(path for pattern in ("*.py", "*.R", "*.js") for path in folder.glob(pattern))
    named += [(path.relative_to(context).as_posix(), path) for path in package]
    protocol = sorted(PROTOCOL.glob("*.py"))
    return named + [(f"{PROTOCOL_NAME}/{path.name}", path) for path in protocol]


def content_hash(context: Path = CONTEXT_DIR, languages: tuple[str, ...] = LANGUAGES) -> str:
    digest = hashlib.sha256()
    for name, path in inputs(context):
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(digest_input(languages))
    return digest.hexdigest()[:12]


def default_tag(context: Path = CONTEXT_DIR, languages: tuple[str, ...] | None = None) -> str:
    """The sandbox image's tag for `languages` (by default the configured ones): the same
    computation when the image is built and when the bot looks for it."""
    chosen = configured_languages() if languages is None else languages
    return f"{IMAGE_REPOSITORY}:{content_hash(context, chosen)}"


def image_languages(client: docker.DockerClient, tag: str) -> tuple[str, ...]:
    """The languages beside Python that the image `tag` has, from its label (none on an
    image built before languages could be chosen)."""
    labels = client.images.get(tag).labels or {}
    return parse_languages(labels.get(LABEL, ""))


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
    languages: tuple[str, ...] | None = None,
) -> str:
    """Build the sandbox image with Python and `languages` (by default the configured
    ones) unless an image with the same content tag exists."""
    languages = configured_languages() if languages is None else languages
    tag = tag or default_tag(context, languages)
    if not force and image_exists(client, tag):
        say(f"Sandbox image {tag} is up to date.")
        return tag
    described = ", ".join(["python", *languages])
    say(f"Building sandbox image {tag} ({described}) ...")
    download_wheels(context, say)
    base = base_image(client, mirror, say)
    if "javascript" in languages:
        install_npm_packages(context, say)
    with tempfile.TemporaryDirectory(prefix="cellmate-sandbox-apt-") as tmp:
        debs = download_debs(client, base, mirror, languages, Path(tmp), say)
        say(f"Building on {base} (this takes a minute or two) ...")
        with tempfile.TemporaryFile(prefix="cellmate-sandbox-context-") as archive:
            build_context(context, archive, languages, debs)
            archive.seek(0)
            docker_build(
                client,
                tag,
                base,
                fileobj=archive,
                say=say,
                buildargs={"LANGUAGES": ",".join(languages)},
            )
    client.images.get(tag).tag(IMAGE_REPOSITORY, "latest")
    say(f"Built {tag}.")
    remove_stale_images(client, keep=tag)
    return tag


def download_debs(
    client: docker.DockerClient,
    base: str,
    mirror: str,
    languages: tuple[str, ...],
    root: Path,
    say: Say,
) -> list[Path]:
    """The Debian packages the languages need that `base` lacks, downloaded on the host."""
    packages = deb_packages(languages)
    if not packages:
        return []
    apt = Apt(root, mirror)
    apt.use_status(base_status(client, base))
    say(f"Resolving {' '.join(packages)} against {base} with {mirror} ...")
    debs = apt.resolve(packages)
    say(f"Downloading {len(debs)} Debian packages on the host ...")
    archives = apt.download(packages)
    return [archives / deb.filename for deb in debs]


def install_npm_packages(context: Path, say: Say) -> None:
    """node_modules for the JavaScript kernel, exactly as the lock file pins it, installed
    on the host without install scripts (zeromq's native addon ships prebuilt for Linux),
    and tslab patched (`patch_tslab`)."""
    npm = shutil.which("npm")
    if npm is None:
        raise ImageBuildError(
            "the JavaScript kernel is installed with npm on the host: install Node.js and npm, "
            f"or leave javascript out of {VARIABLE}"
        )
    lock = context / NPM_DIR / "package-lock.json"
    found = hashlib.sha256(lock.read_bytes()).hexdigest()
    if found != NPM_LOCK_SHA256:
        raise ImageBuildError(
            f"{lock} is not the one the image's tag names: if it changed on purpose, set "
            f"NPM_LOCK_SHA256 in executor/languages.py to {found}"
        )
    say("Installing the JavaScript kernel's npm packages on the host ...")
    for attempt in range(1, NPM_TRIES + 1):  # the registry fails a download now and then
        result = subprocess.run(
            [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--omit=dev"],
            cwd=context / NPM_DIR,
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode == 0:
            patch_tslab(context / NPM_DIR / "node_modules")
            return
        if attempt < NPM_TRIES:
            say(f"npm ci failed (try {attempt} of {NPM_TRIES}); trying again ...")
            time.sleep(5)
    raise ImageBuildError(f"npm ci failed:\n{(result.stdout + result.stderr)[-3000:]}")


def patch_tslab(node_modules: Path) -> None:
    """Apply TSLAB_PATCH to the installed tslab: exactly once, or the build fails (a tslab
    whose executor changed needs the patch looked at again)."""
    path = node_modules / TSLAB_PATCH_FILE
    before, after = TSLAB_PATCH
    text = path.read_text(encoding="utf-8")
    found = text.count(before)
    if found != 1:
        raise ImageBuildError(
            f"{path} has the text TSLAB_PATCH (executor/languages.py) replaces {found} times, "
            "not once: tslab changed, so the patch that returns a cell's last value as its "
            "result needs updating"
        )
    path.write_text(text.replace(before, after), encoding="utf-8")


def build_context(
    context: Path,
    out: IO[bytes],
    languages: tuple[str, ...] = (),
    debs: list[Path] | None = None,
) -> None:
    """The sandbox image's build context as a tar: the inputs, the downloaded wheels, the
    languages' .debs (debs/) and npm packages (npm/node_modules), readable by everyone,
    owned by root. debs/, kernels/ and npm/ are there, if empty, whatever the languages."""

    def plain(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if "__pycache__" in info.name:
            return None
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        executable = info.isdir() or info.mode & 0o100
        info.mode = 0o755 if executable else 0o644
        return info

    with tarfile.open(fileobj=out, mode="w") as tar:
        for folder in ("debs", "kernels", NPM_DIR):
            directory = tarfile.TarInfo(folder)
            directory.type = tarfile.DIRTYPE
            directory.mode = 0o755
            tar.addfile(directory)
        for name, path in inputs(context):
            tar.add(path, arcname=name, filter=plain)
        for name, content in kernelspec_files(languages).items():
            spec = tarfile.TarInfo(name)
            spec.size, spec.mode = len(content), 0o644
            tar.addfile(spec, io.BytesIO(content))
        tar.add(context / "wheels", arcname="wheels", filter=plain)
        for deb in debs or []:
            tar.add(deb, arcname=f"debs/{deb.name}", filter=plain)
        if "javascript" in languages:
            tar.add(
                context / NPM_DIR / "node_modules", arcname=f"{NPM_DIR}/node_modules", filter=plain
            )


def docker_build(
    client: docker.DockerClient,
    tag: str,
    base: str,
    *,
    say: Say,
    path: str | None = None,
    dockerfile: str | None = None,
    fileobj: IO[bytes] | None = None,
    buildargs: dict[str, str] | None = None,
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
            buildargs={**(buildargs or {}), "BASE_IMAGE": base},
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
    """Drop sandbox images of earlier inputs with the same languages (an image with other
    languages stays, for a bot configured for those); one a container still uses stays."""
    languages = image_languages(client, keep)
    for image in client.images.list(name=IMAGE_REPOSITORY):
        tags = set(image.tags)
        if keep in tags or f"{IMAGE_REPOSITORY}:latest" in tags:
            continue
        if (image.labels or {}).get(LABEL, "") != ",".join(languages):
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
