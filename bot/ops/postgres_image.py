"""A PostgreSQL 15 image for the bot's shared database, built without a registry.

The base is the bot's (python:3.11-slim-bookworm or the debootstrap base, both Debian 12).
The host's apt (executor.apt) resolves Debian's postgresql-15 against the packages the base
already has and downloads what is missing into the build context. The tag is a hash of the
Dockerfile, the entrypoint, the base and the exact package versions (the file names apt
lists), so the image is rebuilt when any of them changes, a Debian point release included.
deploy/postgres/ holds the recipe.
"""

from __future__ import annotations

import hashlib
import tarfile
import tempfile
from pathlib import Path
from typing import IO

import docker

from executor.apt import Apt, Deb, base_status
from executor.image import Say, base_image, docker_build, image_exists

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "deploy" / "postgres"
RECIPE_FILES = ("Dockerfile", "entrypoint.sh")
POSTGRES_REPOSITORY = "cellmate-postgres"
PACKAGES = ("postgresql-15",)


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
