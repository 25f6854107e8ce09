"""A PostgreSQL 15 image for the bot's shared database, built without a registry.

The base is the bot's (python:3.11-slim-bookworm or the debootstrap base, both Debian 12).
The host's apt, with a private configuration and state in a temporary folder (nothing on
the host is installed or changed), resolves Debian's postgresql-15 against the packages the
base already has (its dpkg status, copied out of it) and downloads what is missing into the
build context. The tag is a hash of the Dockerfile, the entrypoint, the base and the exact
package versions (the file names apt lists: Debian's archive never serves two contents
under one name, and apt checks each download against the signed index), so the image is
rebuilt when any of them changes, a Debian point release included. deploy/postgres/ holds
the recipe.
"""

from __future__ import annotations

import hashlib
import io
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import docker
import docker.errors

from executor.errors import ImageBuildError
from executor.image import DEBIAN_SUITE, Say, base_image, docker_build, image_exists

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "deploy" / "postgres"
RECIPE_FILES = ("Dockerfile", "entrypoint.sh")
POSTGRES_REPOSITORY = "cellmate-postgres"
PACKAGES = ("postgresql-15",)
KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")


@dataclass(frozen=True)
class Deb:
    url: str
    filename: str


def build_postgres_image(
    client: docker.DockerClient, mirror: str, force: bool = False, say: Say = print
) -> str:
    """Build cellmate-postgres:<hash> (also tagged latest) unless it exists."""
    base = base_image(client, mirror, say)
    with tempfile.TemporaryDirectory(prefix="cellmate-postgres-apt-") as tmp:
        apt = Apt(Path(tmp), mirror)
        apt.use_status(base_status(client, base))
        say(f"Resolving {' '.join(PACKAGES)} against {base} with {mirror} ...")
        debs = apt.resolve(PACKAGES)
        tag = f"{POSTGRES_REPOSITORY}:{postgres_hash(base, debs)}"
        if not force and image_exists(client, tag):
            client.images.get(tag).tag(POSTGRES_REPOSITORY, "latest")
            say(f"PostgreSQL image {tag} is up to date.")
            return tag
        say(f"Downloading {len(debs)} Debian packages on the host ...")
        archives = apt.download(PACKAGES)
        say(f"Building PostgreSQL image {tag} on {base} ...")
        with tempfile.TemporaryFile(prefix="cellmate-postgres-context-") as context:
            write_context(context, [archives / deb.filename for deb in debs])
            context.seek(0)
            docker_build(client, tag, base, fileobj=context, say=say)
    client.images.get(tag).tag(POSTGRES_REPOSITORY, "latest")
    say(f"Built {tag}.")
    return tag


def postgres_hash(base: str, debs: list[Deb]) -> str:
    digest = hashlib.sha256(base.encode() + b"\0")
    for name in RECIPE_FILES:
        digest.update(name.encode() + b"\0" + (RECIPE / name).read_bytes() + b"\0")
    for deb in sorted(debs, key=lambda d: d.filename):
        digest.update(deb.filename.encode() + b"\0")
    return digest.hexdigest()[:12]


def base_status(client: docker.DockerClient, base: str) -> bytes:
    """The base image's /var/lib/dpkg/status: the packages apt need not download."""
    container = client.containers.create(base, command=["true"])
    try:
        stream, _ = container.get_archive("/var/lib/dpkg/status")
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            member = tar.extractfile("status")
            if member is None:
                raise ImageBuildError(f"{base} has no dpkg status")
            return member.read()
    except docker.errors.APIError as exc:
        raise ImageBuildError(f"could not read {base}'s dpkg status: {exc}") from exc
    finally:
        container.remove(force=True)


def write_context(out: IO[bytes], debs: list[Path]) -> None:
    """Dockerfile, entrypoint.sh (executable) and debs/, owned by root."""

    def plain(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        executable = info.isdir() or info.name == "entrypoint.sh"
        info.mode = 0o755 if executable else 0o644
        return info

    with tarfile.open(fileobj=out, mode="w") as tar:
        for name in RECIPE_FILES:
            tar.add(RECIPE / name, arcname=name, filter=plain)
        for deb in debs:
            tar.add(deb, arcname=f"debs/{deb.name}", filter=plain)


class Apt:
    """The host's apt-get, on Debian 12's archive, with configuration, lists, status and
    downloads in `root` alone."""

    def __init__(self, root: Path, mirror: str) -> None:
        self.root = root
        for folder in ("lists/partial", "cache", "archives/partial", "parts"):
            (root / folder).mkdir(parents=True, exist_ok=True)
        (root / "sources.list").write_text(sources(mirror))
        (root / "status").write_bytes(b"")

    def use_status(self, status: bytes) -> None:
        (self.root / "status").write_bytes(status)
        self._run("update")

    def resolve(self, packages: tuple[str, ...]) -> list[Deb]:
        listing = self._run("install", "--print-uris", *packages)
        debs = [parse_uri_line(line) for line in listing.splitlines() if line.startswith("'")]
        if not debs:
            raise ImageBuildError(f"apt found nothing to download for {packages}")
        return debs

    def download(self, packages: tuple[str, ...]) -> Path:
        self._run("install", "--download-only", *packages)
        return self.root / "archives"

    def _run(self, *args: str) -> str:
        apt_get = shutil.which("apt-get")
        if apt_get is None:
            raise ImageBuildError("the PostgreSQL image needs apt-get on the host (Debian, Ubuntu)")
        options = {
            "Dir::Etc::SourceList": self.root / "sources.list",
            "Dir::Etc::SourceParts": self.root / "parts",
            "Dir::State::Lists": self.root / "lists",
            "Dir::State::status": self.root / "status",
            "Dir::Cache": self.root / "cache",
            "Dir::Cache::archives": self.root / "archives",
            "APT::Install-Recommends": "false",
            "Debug::NoLocking": "true",
        }
        command = [apt_get, "-q", "-y"]
        for key, value in options.items():
            command += ["-o", f"{key}={value}"]
        result = subprocess.run([*command, *args], capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise ImageBuildError(
                f"apt-get {args[0]} failed:\n{(result.stdout + result.stderr)[-3000:]}"
            )
        return result.stdout


def sources(mirror: str) -> str:
    """The suite, its updates and, where the mirror is laid out as Debian's own, security."""
    signed = f"[signed-by={KEYRING}] " if KEYRING.exists() else ""
    mirror = mirror.rstrip("/")
    lines = [
        f"deb {signed}{mirror} {DEBIAN_SUITE} main",
        f"deb {signed}{mirror} {DEBIAN_SUITE}-updates main",
    ]
    if mirror.endswith("/debian"):
        lines.append(f"deb {signed}{mirror}-security {DEBIAN_SUITE}-security main")
    return "".join(line + "\n" for line in lines)


def parse_uri_line(line: str) -> Deb:
    """One line of `apt-get --print-uris`: 'URL' FILENAME SIZE [CHECKSUM]."""
    url, filename, *_ = line.split()
    return Deb(url=url.strip("'"), filename=filename)
