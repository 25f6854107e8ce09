"""`cellmate storage check|prune` against local files and Azurite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.azurite import Azurite


def cellmate(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("AZURE_", "CELLMATE_"))}
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        capture_output=True,
        text=True,
        env={**environment, **env},
        timeout=120,
        check=False,
    )


def test_prune_local_artifacts(tmp_path: Path) -> None:
    data = str(tmp_path)
    folder = tmp_path / "files" / "abc" / "run"
    folder.mkdir(parents=True)
    (folder / "old.csv").write_text("a")
    (folder / "old.csv.meta.json").write_text(
        '{"content_type": "text/csv", "created": "2020-01-01T00:00:00+00:00"}'
    )
    done = cellmate("storage", "prune", "--older-than", "30d", CELLMATE_DATA_DIR=data)
    assert done.returncode == 0, done.stderr
    assert (
        done.stdout.strip()
        == f"Removed 1 artifact(s) older than 30d from local files in {tmp_path}/files."
    )
    assert not (folder / "old.csv").exists()
    again = cellmate("storage", "check", CELLMATE_DATA_DIR=data)
    assert (
        again.stdout.strip()
        == f"Storage is usable: local files in {tmp_path}/files, 0 artifact(s)."
    )
    assert (tmp_path / "link-secret").stat().st_mode & 0o777 == 0o600


def test_bad_age_is_explained() -> None:
    done = cellmate("storage", "prune", "--older-than", "a while")
    assert done.returncode == 2
    assert "'a while' is not an age: write it like 30d, 12h, 90m or 1d12h" in done.stderr


def test_azure_check_and_wrong_credentials(azurite: Azurite) -> None:
    good = cellmate(
        "storage",
        "check",
        AZURE_STORAGE_CONNECTION_STRING=azurite.connection_string(),
        AZURE_BLOB_CONTAINER_NAME="cli-check",
    )
    assert good.returncode == 0, good.stderr
    assert (
        good.stdout.strip() == "Storage is usable: Azure Blob container 'cli-check', 0 artifact(s)."
    )
    wrong = cellmate(
        "storage",
        "check",
        AZURE_STORAGE_CONNECTION_STRING=azurite.connection_string(key="B" * 86 + "=="),
        AZURE_BLOB_CONTAINER_NAME="cli-check",
    )
    assert wrong.returncode == 1
    assert "refused the credentials" in wrong.stderr
    assert "Traceback" not in wrong.stderr
