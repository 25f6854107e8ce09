"""What a run produced, as artifact sources: each chart (png, jpeg, svg) and each file."""

from __future__ import annotations

import base64
import binascii

from executor.models import ExecutionResult
from storage.artifacts import ArtifactSource
from storage.content_types import guess_type

IMAGE_TYPES = {"image/png": "png", "image/jpeg": "jpg", "image/svg+xml": "svg"}


def artifact_sources(result: ExecutionResult) -> list[ArtifactSource]:
    """Charts first, as `chart-N.<ext>` in output order, then the files the run changed."""
    found: list[ArtifactSource] = []
    for rich in result.results:
        for mime, suffix in IMAGE_TYPES.items():
            value = rich.data.get(mime)
            content = _decode(value, mime) if isinstance(value, str) else None
            if content is not None:
                found.append(ArtifactSource(f"chart-{len(found) + 1}.{suffix}", content, mime))
                break
    for file in result.files:
        found.append(
            ArtifactSource(file.path.replace("/", "_"), file.content, guess_type(file.path))
        )
    return found


def _decode(value: str, mime: str) -> bytes | None:
    if mime == "image/svg+xml":
        return value.encode("utf-8")
    try:
        return base64.b64decode(value, validate=False)
    except (binascii.Error, ValueError):
        return None
