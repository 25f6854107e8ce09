"""What the Compose tests share: the images the README builds first."""

from __future__ import annotations

import pytest

from bot.ops.images import build_azurite_image, build_bot_image
from executor import default_tag
from executor.docker_backend import connect


@pytest.fixture(scope="module")
def images() -> None:
    """The images the README builds first (no-ops when up to date, as `make test` built them)."""
    client = connect(timeout=900)
    try:
        client.images.get(default_tag())  # the sandbox image: `make build-image`
        build_bot_image(client, mirror="http://deb.debian.org/debian")
        build_azurite_image(client, mirror="http://deb.debian.org/debian")
    finally:
        client.close()
