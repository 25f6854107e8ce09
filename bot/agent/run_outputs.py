"""What a run produced, as artifact sources: each chart (png, jpeg, svg) and each file."""

from __future__ import annotations

from executor.models import ExecutionResult
from storage.artifacts import ArtifactSource
from storage.content_types import guess_type

IMAGE_TYPES = {"image/png": "png", "image/jpeg": "jpg", "image/svg+xml": "svg"}


def artifact_sources(result: ExecutionResult) -> list[ArtifactSource]:
    """Charts first, as `chart-N.<ext>` in output order, then the files the run changed."""
    found: list[ArtifactSource] = []
    for rich in result.results:
        for mime, suffix in IMAGE_TYPES.items():
            content = rich.image_bytes(mime)
            if content is not None:
                found.append(ArtifactSource(f"chart-{len(found) + 1}.{suffix}", content, mime))
                break
    for file in result.files:
        found.append(
            ArtifactSource(file.path.replace("/", "_"), file.content, guess_type(file.path))
        )
    return found
