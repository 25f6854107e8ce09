"""Parallel test workers never share sandboxes: each labels its own with an instance of its
own, read by every layer (whichever module imports it first), so that one worker's checks
and sweeps never see another's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_worker_labels_its_sandboxes_with_its_own_instance() -> None:
    for worker in ("gw0", "gw7"):
        found = subprocess.run(
            [
                sys.executable,
                "-c",
                "import tests.conftest, tests.support.sandboxes as s, "
                "tests.kubernetes.conftest as k; print(s.TEST_INSTANCE, k.TEST_INSTANCE)",
            ],
            cwd=ROOT,
            env={**os.environ, "PYTEST_XDIST_WORKER": worker, "CELLMATE_TEST_INSTANCE": "ci"},
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        assert found.stdout.split() == [f"ci-{worker}", f"ci-{worker}"]
