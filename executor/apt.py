"""Debian packages for an image built without network in its containers.

The host's apt-get, with a private configuration and state in a folder of its own (nothing
on the host is installed or changed), resolves packages against the packages a base image
already has (its dpkg status, copied out of it) and downloads what is missing; the .debs go
into the build context, where dpkg installs them. Debian's archive never serves two contents
under one file name, and apt checks each download against the signed index, so the file
names apt lists are a faithful digest of what an image gets.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors

from executor.errors import ImageBuildError

DEBIAN_SUITE = "bookworm"
KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")


@dataclass(frozen=True)
class Deb:
    url: str
    filename: str


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
            raise ImageBuildError("Debian packages for an image need apt-get on the host")
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
